// Matrix multiplication: on AVX512-BF16 CPUs packed bf16 weights run our own kernels (a weight-
// streaming GEMV for small M, a register-tiled GEMM for larger M); oneDNN covers the rest (the
// only file that includes oneDNN is matmul.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace hlx::kernels {

// C[b] = A[b] · B[b] for b < batch. A is [batch, M, K]; B is [batch, K, N], or [batch, N, K] when
// b_transposed; C is [batch, M, N]. All row-major and contiguous. Operand types f32 or bf16 (f16 is
// accepted and converted); C is f32 or bf16. Primitives are cached per shape.
struct MatmulDesc {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  DType a_type = DType::kF32, b_type = DType::kF32, c_type = DType::kF32;
  bool b_transposed = false;
};
Status matmul(const MatmulDesc& desc, const void* a, const void* b, void* c);

// True when 16-bit operands are computed as bf16 (f16 rounded to bf16, f32 activations meeting a
// bf16 weight rounded to bf16). False on CPUs where oneDNN has no bf16 matmul (no AVX-512): then
// every 16-bit operand is widened to f32 and the product is computed in f32.
bool bf16_matmul_available();

// Which kernels a bf16 weight's products may take. kRowInvariant (the text decoders): a row's bits
// are the same at any M, through the streaming kernel (M <= 8) and the own GEMM alike, so chunked,
// batched and prefix-reused rows equal the rows computed alone. kAnyOrder (the vision towers, whose
// images are encoded at fixed bucket shapes): larger M may take a faster kernel whose rows differ in
// bits from the streaming kernel's; today oneDNN's AMX brgemm tiles on CPUs with AMX-BF16.
enum class ProductOrder { kRowInvariant = 0, kAnyOrder = 1 };

// How packed bf16 weights are multiplied on this machine, for `hlx bench`: the oneDNN
// implementation chosen for a prefill-sized product and whether small-M products use our
// AVX512-BF16 streaming kernel and large-M ones the pool-tiled path, for weights packed with `order`.
struct MatmulPaths {
  std::string gemm_impl;      // oneDNN impl_info_str, e.g. "brg:avx512_core_bf16"
  std::string weight_layout;  // packed weight format, e.g. "BA16a64b2a"
  bool stream_gemv = false;   // M <= stream_max_m(): gemv_vnni_bf16_avx512
  int64_t stream_max_m = 0;
  bool pool_tiles = false;  // larger M: single-threaded oneDNN tiles on the runtime pool
  bool own_gemm = false;    // larger M: hlx's gemm_bf16_avx512 on the pool (before pool_tiles)
};
MatmulPaths matmul_paths(ProductOrder order = ProductOrder::kRowInvariant);

// How a packed weight is stored. kAsStored keeps the checkpoint's type (bf16/f32; f16 becomes
// bf16). kInt8 quantizes per output column n: scale[n] = max_k |w[k, n]| / 127, q = round-half-even
// (w / scale) in [-127, 127]; each product quantizes its activations per row to int16 and sums
// integer products exactly in chunks (the contract is in matmul_int8.h). kInt4 quantizes groups of
// kInt4LoadGroup k per output column to 4 bits with an f32 scale and min (|error| <= (max - min) /
// 30 of the group; layout and arithmetic in matmul_int4.h); products quantize their activations
// to int16 per row and weight group and sum integer products exactly per group.
enum class WeightFormat { kAsStored = 0, kInt8 = 1, kInt4 = 2 };
constexpr int64_t kInt4LoadGroup = 128;
const char* weight_format_name(WeightFormat f);

// How weights bound on this thread are packed (DotKernel reads it in set_constant_input);
// Program::bind_weight sets it from ProgramOptions::weight_format and product_order.
struct PackOptions {
  WeightFormat format = WeightFormat::kAsStored;
  ProductOrder order = ProductOrder::kRowInvariant;
};
PackOptions current_pack_options();
class PackScope {
 public:
  explicit PackScope(PackOptions o);
  ~PackScope();
  PackScope(const PackScope&) = delete;
  PackScope& operator=(const PackScope&) = delete;

 private:
  PackOptions saved_;
};

// Called by a packer with a span of its source it will not read again (from any of its threads),
// so a caller whose source is a memory-mapped checkpoint can drop those pages as packing goes:
// without it a 0.31 GB tied embedding stays resident beside its packed copy until the end.
using SourceDone = void (*)(const void* p, size_t bytes);

// A weight matrix used as the right-hand side of many products, packed once at load.
// `data` is [K, N] row-major, or [N, K] when `transposed` (Hugging Face Linear layout), of `type`.
class PackedWeight {
 public:
  static Result<std::unique_ptr<PackedWeight>> pack(DType type, int64_t k, int64_t n, bool transposed, const void* data,
                                                    WeightFormat format = WeightFormat::kAsStored,
                                                    ProductOrder order = ProductOrder::kRowInvariant,
                                                    SourceDone source_done = nullptr);
  virtual ~PackedWeight() = default;
  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  // C[M, N] (c_type f32 or bf16) = A[M, K] (a_type f32 or bf16) · W. Thread-safe.
  virtual Status multiply(int64_t m, DType a_type, const void* a, DType c_type, void* c) const = 0;
  // Bytes a product streams from memory (the packed data, plus scales for int8).
  virtual size_t packed_bytes() const = 0;
  // Whether the packing kept every bit of a transposed ([N, K]) bf16 source (bf16 as stored, in the
  // BA16a64b2a layout); then copy_row(n, out) writes its row n < N to out[0, K) as bf16. Lets a tied
  // embedding be gathered from its packed lm_head instead of its mapped table.
  virtual bool exact_rows() const { return false; }
  virtual void copy_row(int64_t /*n*/, void* /*out*/) const {}

 protected:
  int64_t k_ = 0, n_ = 0;
};

// Sibling products that share their left operand: C_i[M, N_i] = A[M, K] · W_i for every i (all
// W_i with the same K). When every W_i is a bf16 weight on the streaming kernel (M <=
// stream_max_m()) or on the own GEMM (larger M), or every W_i is int8, they run as one job over
// the union of their column blocks (one pool start and one tail for the group; A is packed or
// quantized once); otherwise each runs multiply() in turn. Either way each C_i has exactly the
// bits W_i->multiply() gives it. kInvalidArgument for a null weight or mismatched K.
struct GroupedProduct {
  const PackedWeight* weight = nullptr;
  void* c = nullptr;
};
Status multiply_grouped(int64_t m, DType a_type, const void* a, DType c_type,
                        const std::vector<GroupedProduct>& products);

// Bytes of a [K, N] weight packed as int8 (what PackedWeight::packed_bytes() reports), for rooflines.
size_t int8_packed_bytes(int64_t k, int64_t n);

// Packs an int8 weight (matmul_int8.cc); PackedWeight::pack calls it for WeightFormat::kInt8 after
// checking the type (f32/bf16/f16) and k, n > 0.
Result<std::unique_ptr<PackedWeight>> pack_int8(DType type, int64_t k, int64_t n, bool transposed, const void* data,
                                                SourceDone source_done = nullptr);
// multiply_grouped over int8 weights (matmul_int8.cc): false (nothing done) unless every product's
// weight is int8 with the same K; else A is quantized once and all products run as one pool job.
Result<bool> multiply_grouped_int8(int64_t m, DType a_type, const void* a, DType c_type,
                                   const std::vector<GroupedProduct>& products);

// A 4-bit weight described per output column, for packing (matmul_int4.h): column(n, q, s, m)
// fills q[k'] (k' < K, codes 0..15, in packed k order) and s[g], m[g] for the ceil(K / group)
// groups so that w(k', n) = s[g] * q[k'] + m[g] with g = k' / group; it is called concurrently for
// different n. perm (empty, or a permutation of 0..K-1): packed k' multiplies activation perm[k'].
struct Int4Source {
  int64_t k = 0, n = 0, group = 0;
  std::function<Status(int64_t n, uint8_t* q, float* s, float* m)> column;
  std::vector<int32_t> perm;
  // Optional: told when columns [n0, n1) have all been read (concurrently for different blocks).
  std::function<void(int64_t n0, int64_t n1)> columns_done;
};
Result<std::unique_ptr<PackedWeight>> pack_int4(const Int4Source& source);
// Quantizes a [K, N] (or [N, K] when transposed) f32/bf16/f16 weight to 4 bits in groups of
// `group` k (the WeightFormat::kInt4 rule above); kInvalidArgument names a non-finite value.
Result<std::unique_ptr<PackedWeight>> pack_int4(DType type, int64_t k, int64_t n, bool transposed, const void* data,
                                                int64_t group = kInt4LoadGroup, SourceDone source_done = nullptr);
// Bytes of a [K, N] weight packed as int4 with `group` (4-bit codes plus f32 scale and offset per
// group and column), for rooflines.
size_t int4_packed_bytes(int64_t k, int64_t n, int64_t group = kInt4LoadGroup);
// multiply_grouped over int4 weights: false unless every weight is int4 with the same K, group and
// permutation; else A is prepared once and all products run as one pool job.
Result<bool> multiply_grouped_int4(int64_t m, DType a_type, const void* a, DType c_type,
                                   const std::vector<GroupedProduct>& products);

}  // namespace hlx::kernels
