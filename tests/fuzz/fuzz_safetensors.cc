// libFuzzer target: arbitrary bytes as a safetensors file. Opening must never crash; every tensor
// of an accepted file must lie inside the buffer (ASan checks the reads), and an accepted file
// must survive a write -> read round trip.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "io/safetensors.h"

using namespace hlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = SafetensorsFile::from_bytes(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!file.ok()) return 0;
  NamedTensors tensors;
  for (const std::string& name : file->names()) {
    auto t = file->tensor(name);
    if (!t.ok()) std::abort();  // a listed name must be readable
    // Touch every byte so an out-of-range view shows up under ASan.
    const auto* p = static_cast<const uint8_t*>(t->raw());
    unsigned sum = 0;
    for (size_t i = 0; i < t->nbytes(); ++i) sum += p[i];
    if (sum == 0xdeadbeef) std::abort();  // keeps the loop from being optimised away
    tensors.emplace_back(name, *t);
  }
  auto again = serialize_safetensors(tensors, file->metadata());
  if (!again.ok()) return 0;  // e.g. an empty tensor name, which the writer refuses
  auto reread = SafetensorsFile::from_bytes(*again, "fuzz-roundtrip");
  if (!reread.ok() || reread->names() != file->names() || reread->metadata() != file->metadata()) std::abort();
  for (const auto& [name, t] : tensors) {
    auto u = reread->tensor(name);
    if (!u.ok() || u->dtype() != t.dtype() || u->shape() != t.shape() ||
        (t.nbytes() && std::memcmp(u->raw(), t.raw(), t.nbytes()) != 0))
      std::abort();
  }
  return 0;
}
