// NumPy .npy files (format versions 1.0, 2.0 and 3.0), the interchange format with numpy oracles.
//
// Supported descr strings (little-endian only):
//   '<f4' f32, '<f2' f16, '<i8' i64, '<i4' i32, '<i2' i16, '|i1' i8, '|u1' u8, '|b1' i1 (bool).
// numpy has no bfloat16, so bf16 travels as its raw bits in '<u2'. A '<u2' file is read only when
// the caller says what the bits mean (`reinterpret_u16_as`); otherwise it is kUnsupported.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace hlx {

struct NpyHeader {
  int major = 1, minor = 0;
  std::string descr;
  bool fortran_order = false;
  Shape shape;
  size_t data_offset = 0;  // where the array bytes start
};

// Parses and validates the magic, version and header dict (keys exactly descr, fortran_order,
// shape). Does not look at the dtype or the data.
Result<NpyHeader> parse_npy_header(std::string_view bytes, const std::string& source = "<memory>");

// Parses a complete .npy image into a freshly owned tensor. Errors: kParse for malformed headers
// or trailing bytes, kIo for truncated data, kUnsupported for big-endian, Fortran order or dtypes
// hlx lacks. `reinterpret_u16_as` (kBF16, kF16 or kI16) applies only to '<u2' files; other
// files keep their own dtype. Bool bytes other than 0 are normalised to 1.
Result<Tensor> parse_npy(std::string_view bytes, std::optional<DType> reinterpret_u16_as = std::nullopt,
                         const std::string& source = "<memory>");
Result<Tensor> read_npy(const std::string& path, std::optional<DType> reinterpret_u16_as = std::nullopt);

// A version 1.0 image (2.0 if the header would not fit), header padded to 64 bytes as numpy does.
// bf16 is written as '<u2'.
Result<std::string> encode_npy(const Tensor& tensor);
Status write_npy(const std::string& path, const Tensor& tensor);

}  // namespace hlx
