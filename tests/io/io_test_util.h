// Helpers shared by the io tests: a scratch directory, raw file writes, deterministic tensors.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/tensor.h"

namespace hlx::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hlx_io_test_XXXXXX").string();
    path_ = mkdtemp(tmpl.data()) ? tmpl : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Tensor with varied, deterministic bytes; bool tensors hold 0/1, floats hold finite values.
inline Tensor pattern_tensor(DType dtype, Shape shape, uint32_t seed) {
  Tensor t = Tensor::empty(dtype, std::move(shape));
  uint32_t s = seed * 2654435761u + 1;
  auto next = [&] {
    s = s * 1664525u + 1013904223u;
    return s >> 8;
  };
  int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    uint32_t r = next();
    float f = (float(r % 20001) - 10000.f) / 128.f;
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[i] = f;
        break;
      case DType::kF16:
        t.data<uint16_t>()[i] = f32_to_f16(f).bits;
        break;
      case DType::kBF16:
        t.data<uint16_t>()[i] = f32_to_bf16(f).bits;
        break;
      case DType::kI64:
        t.data<int64_t>()[i] = (int64_t(r) << 31) - (int64_t(1) << 40) - i;
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = int32_t(r) - (1 << 23);
        break;
      case DType::kI16:
        t.data<int16_t>()[i] = int16_t(r);
        break;
      case DType::kI8:
        t.data<int8_t>()[i] = int8_t(r);
        break;
      case DType::kU8:
        t.data<uint8_t>()[i] = uint8_t(r);
        break;
      case DType::kI1:
        t.data<uint8_t>()[i] = uint8_t(r & 1);
        break;
    }
  }
  return t;
}

inline bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

// Runs a Python script with Debian's numpy-capable interpreter; returns its exit code.
inline int run_python(const std::string& script_path, const std::string& args) {
  std::string cmd = "/usr/bin/python3 " + script_path + " " + args;
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace hlx::testing
