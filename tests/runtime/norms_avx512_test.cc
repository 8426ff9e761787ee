// The AVX-512 rms_norm (kernels::rms_norm on a CPU with AVX-512) must give the portable loop's
// bits exactly (the same summation order and roundings), for f32 and bf16 rows, dims with and
// without a tail of 1-3 or 4-15 elements, one row and a parallel batch, and in place.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "runtime/kernels/cpu.h"
#include "runtime/kernels/norms.h"
#include "runtime/kernels/norms_internal.h"

namespace hlx {
namespace {

TEST(NormsAvx512, RmsNormBitsEqualPortable) {
  if (!(kernels::cpu_features().avx512f && kernels::cpu_features().avx512bw)) GTEST_SKIP() << "no AVX-512";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int64_t rows : {1, 5, 300})
    for (int64_t dim : {1, 2, 3, 4, 7, 16, 19, 60, 128, 1000, 1024})
      for (DType xt : {DType::kF32, DType::kBF16})
        for (DType wt : {DType::kF32, DType::kBF16}) {
          const size_t es = dtype_size(xt), n = size_t(rows * dim);
          std::vector<uint8_t> x(n * es), w(size_t(dim) * dtype_size(wt));
          for (size_t i = 0; i < n; ++i) {
            float v = u(rng) * (i % 97 == 0 ? 1e-20f : 1.f);  // some tiny values too
            if (xt == DType::kF32)
              std::memcpy(&x[i * 4], &v, 4);
            else {
              bf16 h = f32_to_bf16(v);
              std::memcpy(&x[i * 2], &h, 2);
            }
          }
          for (int64_t i = 0; i < dim; ++i) {
            float v = u(rng);
            if (wt == DType::kF32)
              std::memcpy(&w[size_t(i) * 4], &v, 4);
            else {
              bf16 h = f32_to_bf16(v);
              std::memcpy(&w[size_t(i) * 2], &h, 2);
            }
          }
          std::vector<uint8_t> want(x.size()), got(x.size()), inplace = x;
          ASSERT_TRUE(
              kernels::internal::rms_norm_portable(rows, dim, xt, x.data(), wt, w.data(), 1e-6f, 1.f, want.data())
                  .ok());
          ASSERT_TRUE(kernels::rms_norm(rows, dim, xt, x.data(), wt, w.data(), 1e-6f, 1.f, got.data()).ok());
          ASSERT_TRUE(kernels::rms_norm(rows, dim, xt, inplace.data(), wt, w.data(), 1e-6f, 1.f, inplace.data()).ok());
          EXPECT_EQ(got, want) << "rows " << rows << " dim " << dim << " " << dtype_name(xt) << "/" << dtype_name(wt);
          EXPECT_EQ(inplace, want) << "in place: rows " << rows << " dim " << dim << " " << dtype_name(xt);
        }
}

}  // namespace
}  // namespace hlx
