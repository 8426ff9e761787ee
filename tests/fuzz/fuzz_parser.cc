// libFuzzer target: arbitrary bytes as MLIR text. The parser must return a module or a typed error
// (kParse, or kUnsupported for valid StableHLO hlx does not implement), never crash; an accepted
// module must print, re-parse, and print to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "stablehlo/parser.h"
#include "stablehlo/printer.h"

using namespace hlx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = shlo::parse_module(text, "fuzz");
  if (!m.ok()) {
    if (m.status().kind() != ErrorKind::kParse && m.status().kind() != ErrorKind::kUnsupported) std::abort();
    return 0;
  }
  std::string first = shlo::print_module(*m);
  auto again = shlo::parse_module(first, "fuzz-printed");
  if (!again.ok()) std::abort();
  if (shlo::print_module(*again) != first) std::abort();
  return 0;
}
