// libFuzzer target: arbitrary bytes as an .npy file, read plain and with '<u2' as bf16. An accepted
// array must re-encode and re-parse to the same dtype, shape and bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string_view>

#include "io/npy.h"

using namespace hlx;

static void check(std::string_view bytes, std::optional<DType> u16_as) {
  auto t = parse_npy(bytes, u16_as, "fuzz");
  if (!t.ok()) return;
  auto encoded = encode_npy(*t);
  if (!encoded.ok()) std::abort();
  auto back = parse_npy(*encoded, u16_as, "fuzz-roundtrip");
  if (!back.ok()) std::abort();
  // bf16 re-reads as bf16 only when requested; everything else keeps its dtype.
  if (back->dtype() != t->dtype() || back->shape() != t->shape()) std::abort();
  if (t->nbytes() && std::memcmp(back->raw(), t->raw(), t->nbytes()) != 0) std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check(bytes, std::nullopt);
  check(bytes, DType::kBF16);
  return 0;
}
