// Native kernels in the runtime's registry: oneDNN-backed stablehlo.dot_general for the layouts
// that are plain (batched) matmuls, and the hlx.* composites (docs/COMPOSITES.md). Every factory
// checks operand types and shapes at compile time; a dot_general it cannot map without copies is
// declined with kUnsupported so the generic reference kernel takes it.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

#include "runtime/kernels/attention.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/norms.h"
#include "runtime/kernels/rotary.h"
#include "runtime/op_kernel.h"
#include "runtime/program.h"
#include "stablehlo/shape_inference.h"

namespace hlx::rt {
namespace {

using shlo::Attr;
using shlo::TensorType;

std::string types_of(const shlo::Op& op, const shlo::Function& fn) {
  std::string s = "(";
  for (size_t i = 0; i < op.operands.size(); ++i) s += (i ? ", " : "") + fn.type_of(op.operands[i]).to_string();
  s += ") -> (";
  for (size_t i = 0; i < op.results.size(); ++i) s += (i ? ", " : "") + fn.type_of(op.results[i]).to_string();
  return s + ")";
}

template <class... Args>
Status unsupported(const shlo::Op& op, const shlo::Function& fn, const Args&... args) {
  return make_error(ErrorKind::kUnsupported, "native ", op.name, " ", types_of(op, fn), ": ", args...);
}
template <class... Args>
Status invalid(const std::string& what, const shlo::Op& op, const shlo::Function& fn, const Args&... args) {
  return make_error(ErrorKind::kInvalidArgument, what, " ", types_of(op, fn), ": ", args...);
}

// ---------------------------------------------------------------- dot_general

bool is_prefix_iota(const std::vector<int64_t>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int64_t(i)) return false;
  return true;
}

// Keeps one packed copy per distinct weight: a tied embedding used as lm_head, or the same weight
// in several entries, is packed once. An entry holds the source tensor so its address cannot be
// reused while the entry lives.
struct SharedPacked {
  Tensor source;
  std::shared_ptr<const kernels::PackedWeight> packed;
};
using PackKey = std::tuple<const void*, int64_t, int64_t, bool, int, int, int>;  // ..., dtype, format, order
std::mutex g_pack_mu;
std::map<PackKey, std::weak_ptr<SharedPacked>> g_pack_cache;

// After packing, the checkpoint's own pages of a weight are no longer read by matmuls; when they
// belong to a read-only private file mapping (a memory-mapped checkpoint), they are dropped from
// this process's resident set, block by block as the packer finishes them. The page cache keeps
// them, and any later read (an embedding gather on a tied lm_head, or a block boundary's page the
// packer still reads) faults the same bytes back in. Anything else (heap memory, writable
// mappings) is left alone: MADV_DONTNEED would discard its contents.
bool in_readonly_file_mapping(const void* data, size_t bytes) {
  const uintptr_t lo = uintptr_t(data), hi = lo + bytes;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long long a = 0, b = 0, offset = 0, inode = 0;
    char perms[5] = {0};
    unsigned dev_major = 0, dev_minor = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %4s %llx %x:%x %llu", &a, &b, perms, &offset, &dev_major, &dev_minor,
                    &inode) != 7)
      continue;
    if (lo >= a && hi <= b) return inode != 0 && std::string(perms) == "r--p";
  }
  return false;
}

// Drops the whole pages inside [data, data + bytes) of a read-only file mapping.
void drop_mapped_pages(const void* data, size_t bytes) {
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (uintptr_t(data) + page - 1) / page * page;
  const uintptr_t hi = (uintptr_t(data) + bytes) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

// Weights a loader packed itself (checkpoints stored quantized): placeholder address -> packed.
std::map<const void*, std::weak_ptr<SharedPacked>> g_prepacked;

Result<std::shared_ptr<SharedPacked>> pack_shared(const Tensor& t, int64_t k, int64_t n, bool transposed,
                                                  kernels::PackOptions o) {
  PackKey key{t.raw(), k, n, transposed, int(t.dtype()), int(o.format), int(o.order)};
  std::lock_guard<std::mutex> lock(g_pack_mu);
  if (auto pre = g_prepacked.find(t.raw()); pre != g_prepacked.end())
    if (auto sp = pre->second.lock()) {
      // Packed as W[k, n] from a Linear's [N, K]: only a product contracting the placeholder's
      // last dimension (transposed) multiplies by it.
      if (!transposed || sp->packed->k() != k || sp->packed->n() != n)
        return make_error(ErrorKind::kUnsupported, "a weight stored packed (", sp->packed->n(), "x", sp->packed->k(),
                          " Linear) is used as a ", transposed ? "transposed " : "", k, "x", n, " matmul operand");
      return sp;
    }
  auto it = g_pack_cache.find(key);
  if (it != g_pack_cache.end())
    if (auto sp = it->second.lock()) return sp;
  const bool mapped = in_readonly_file_mapping(t.raw(), t.nbytes());
  HLX_ASSIGN_OR_RETURN(auto packed, kernels::PackedWeight::pack(t.dtype(), k, n, transposed, t.raw(), o.format, o.order,
                                                                mapped ? drop_mapped_pages : nullptr));
  auto sp = std::make_shared<SharedPacked>(SharedPacked{t, std::move(packed)});
  g_pack_cache[key] = sp;
  if (mapped) drop_mapped_pages(t.raw(), t.nbytes());
  return sp;
}

class DotKernel final : public OpKernel {
 public:
  kernels::MatmulDesc desc;
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    if (packed_ && desc.batch == 1 && in[1]->raw() == packed_->source.raw())
      return packed_->packed->multiply(desc.m, desc.a_type, in[0]->raw(), desc.c_type, out[0]->raw());
    return kernels::matmul(desc, in[0]->raw(), in[1]->raw(), out[0]->raw());
  }
  Status set_constant_input(int index, const Tensor& value) override {
    if (index != 1 || desc.batch != 1) return ok_status();
    packed_.reset();
    HLX_ASSIGN_OR_RETURN(packed_,
                         pack_shared(value, desc.k, desc.n, desc.b_transposed, kernels::current_pack_options()));
    return ok_status();
  }
  // The packed weight run() would multiply by when `rhs` is the right operand, else null.
  const kernels::PackedWeight* packed_for(const Tensor& rhs) const {
    return packed_ && desc.batch == 1 && rhs.raw() == packed_->source.raw() ? packed_->packed.get() : nullptr;
  }

 private:
  std::shared_ptr<SharedPacked> packed_;
};

// Sibling dot_generals that read one left operand, each with a fixed right operand (program.cc
// groups them): inputs {lhs, rhs_0, rhs_1, ...}, outputs {result_0, result_1, ...}. Runs
// kernels::multiply_grouped once every member has its packed weight; otherwise (a weight not
// bound as packed) each member's own kernel in turn. Each result has the member's own bits.
class GroupedDotKernel final : public OpKernel {
 public:
  std::vector<std::unique_ptr<DotKernel>> members;
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    products_.clear();
    for (size_t i = 0; i < members.size(); ++i) {
      const kernels::PackedWeight* w = members[i]->packed_for(*in[i + 1]);
      if (!w) break;
      products_.push_back({w, out[i]->raw()});
    }
    if (products_.size() == members.size()) {
      const kernels::MatmulDesc& d = members[0]->desc;
      return kernels::multiply_grouped(d.m, d.a_type, in[0]->raw(), d.c_type, products_);
    }
    for (size_t i = 0; i < members.size(); ++i) HLX_RETURN_IF_ERROR(members[i]->run({in[0], in[i + 1]}, {out[i]}));
    return ok_status();
  }
  Status set_constant_input(int index, const Tensor& value) override {
    if (index < 1 || size_t(index) > members.size()) return ok_status();
    return members[size_t(index) - 1]->set_constant_input(1, value);
  }

 private:
  std::vector<kernels::GroupedProduct> products_;
};

Result<std::unique_ptr<OpKernel>> make_dot(const shlo::Op& op, const shlo::Function& fn) {
  if (op.operands.size() != 2 || op.results.size() != 1) return unsupported(op, fn, "expects 2 operands, 1 result");
  const TensorType& lt = fn.type_of(op.operands[0]);
  const TensorType& rt = fn.type_of(op.operands[1]);
  const TensorType& ot = fn.type_of(op.results[0]);
  auto in_ok = [](DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; };
  if (!in_ok(lt.dtype) || !in_ok(rt.dtype) || (ot.dtype != DType::kF32 && ot.dtype != DType::kBF16))
    return unsupported(op, fn, "element types");
  const Attr* attr = op.attr("dot_dimension_numbers");
  if (!attr) return unsupported(op, fn, "no dot_dimension_numbers");
  Result<shlo::DotDims> dn = shlo::dot_dims_from_attr(*attr);
  if (!dn.ok()) return unsupported(op, fn, dn.status().message());
  const auto &lb = dn->lhs_batching, &rb = dn->rhs_batching;
  const auto &lc = dn->lhs_contracting, &rc = dn->rhs_contracting;
  const int64_t nb = int64_t(lb.size());
  // Batch dims leading on both sides, one contracting dim: last of lhs, and one of the last two of rhs.
  if (!is_prefix_iota(lb) || rb != lb || lc.size() != 1 || rc.size() != 1)
    return unsupported(op, fn, "dimension numbers are not a (batched) matmul");
  if (lt.rank() < nb + 1 || rt.rank() != nb + 2 || lc[0] != lt.rank() - 1 || (rc[0] != nb && rc[0] != nb + 1))
    return unsupported(op, fn, "dimension numbers are not a (batched) matmul");
  kernels::MatmulDesc d;
  d.batch = 1;
  for (int64_t i = 0; i < nb; ++i) {
    if (lt.shape[size_t(i)] != rt.shape[size_t(i)]) return unsupported(op, fn, "batch sizes differ");
    d.batch *= lt.shape[size_t(i)];
  }
  d.m = 1;
  for (int64_t i = nb; i < lt.rank() - 1; ++i) d.m *= lt.shape[size_t(i)];
  d.k = lt.shape.back();
  d.b_transposed = rc[0] == nb + 1;
  d.n = rt.shape[size_t(d.b_transposed ? nb : nb + 1)];
  if (rt.shape[size_t(rc[0])] != d.k) return unsupported(op, fn, "contracting sizes differ");
  Shape expect(lt.shape.begin(), lt.shape.end() - 1);
  expect.push_back(d.n);
  if (ot.shape != expect) return unsupported(op, fn, "result shape is not ", shape_to_string(expect));
  d.a_type = lt.dtype;
  d.b_type = rt.dtype;
  d.c_type = ot.dtype;
  auto k = std::make_unique<DotKernel>();
  k->desc = d;
  return std::unique_ptr<OpKernel>(std::move(k));
}

}  // namespace

Result<Tensor> packed_placeholder(DType dtype, const Shape& shape) {
  HLX_ASSIGN_OR_RETURN(int64_t count, checked_num_elements(shape));
  const size_t bytes = std::max<size_t>(1, size_t(count) * dtype_size(dtype));
  // Address space only: PROT_NONE pages are never backed, and a stray read faults loudly.
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return make_error(ErrorKind::kIo, "packed_placeholder: mmap of ", bytes, " bytes");
  std::shared_ptr<void> keep(p, [bytes](void* q) { munmap(q, bytes); });
  return Tensor::borrow(dtype, shape, p, std::move(keep));
}

std::shared_ptr<void> register_packed_weight(const Tensor& placeholder, std::unique_ptr<kernels::PackedWeight> packed) {
  auto sp = std::make_shared<SharedPacked>(SharedPacked{placeholder, std::move(packed)});
  std::lock_guard<std::mutex> lock(g_pack_mu);
  g_prepacked[placeholder.raw()] = sp;
  const void* key = placeholder.raw();
  // The handle keeps the packed weight; dropping it unregisters the placeholder.
  return std::shared_ptr<void>(new std::shared_ptr<SharedPacked>(sp), [key](void* h) {
    {
      std::lock_guard<std::mutex> l(g_pack_mu);
      g_prepacked.erase(key);
    }
    delete static_cast<std::shared_ptr<SharedPacked>*>(h);
  });
}

std::shared_ptr<const kernels::PackedWeight> exact_packed_copy(const Tensor& weight) {
  if (weight.dtype() != DType::kBF16 || weight.shape().size() != 2) return nullptr;
  const int64_t n = weight.shape()[0], k = weight.shape()[1];
  std::lock_guard<std::mutex> lock(g_pack_mu);
  for (auto it = g_pack_cache.lower_bound(PackKey{weight.raw(), k, n, true, 0, 0, 0});
       it != g_pack_cache.end() && std::get<0>(it->first) == weight.raw(); ++it) {
    const PackKey& key = it->first;
    if (std::get<1>(key) != k || std::get<2>(key) != n || !std::get<3>(key) ||
        std::get<5>(key) != int(kernels::WeightFormat::kAsStored))
      continue;
    if (auto sp = it->second.lock(); sp && sp->packed->exact_rows())
      return std::shared_ptr<const kernels::PackedWeight>(sp, sp->packed.get());
  }
  return nullptr;
}

void release_table_rows(const Tensor& table, const int64_t* rows, size_t count) {
  if (count == 0 || table.shape().size() != 2 || table.nbytes() == 0) return;
  // Whether the table is in a read-only file mapping, from /proc/self/maps once per table. The
  // entry holds the table's storage weakly: while that lives, so does the mapping under the
  // address; once it is gone, the address may be reused (even by heap memory, which MADV_DONTNEED
  // would wipe), so the entry is checked again.
  struct Seen {
    std::weak_ptr<void> storage;
    bool in_file;
  };
  static std::mutex mu;
  static std::map<std::pair<const void*, size_t>, Seen> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    Seen& e = seen[{table.raw(), table.nbytes()}];
    if (!table.storage() || e.storage.lock() != table.storage())  // no owner: nothing to tie the answer to
      e = {table.storage(), in_readonly_file_mapping(table.raw(), table.nbytes())};
    if (!e.in_file) return;
  }
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE)), window = uintptr_t(2) << 20;
  const uintptr_t base = uintptr_t(table.raw()), row_bytes = table.nbytes() / size_t(table.shape()[0]);
  const uintptr_t lo_limit = base / page * page, hi_limit = (base + table.nbytes() + page - 1) / page * page;
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;  // windows of the rows, clipped, merged below
  for (size_t i = 0; i < count; ++i) {
    const uintptr_t a = base + uintptr_t(rows[i]) * row_bytes;
    spans.push_back(
        {std::max(lo_limit, a / window * window), std::min(hi_limit, (a + row_bytes + window - 1) / window * window)});
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size();) {
    auto [lo, hi] = spans[i];
    for (++i; i < spans.size() && spans[i].first <= hi; ++i) hi = std::max(hi, spans[i].second);
    madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  }
}

void read_table_rows(const Tensor& table, const int64_t* rows, size_t count, const std::function<void(size_t)>& read) {
  for (size_t i0 = 0; i0 < count; i0 += kTableRowsPerRelease) {
    const size_t i1 = std::min(count, i0 + kTableRowsPerRelease);
    for (size_t i = i0; i < i1; ++i) read(i);
    release_table_rows(table, rows + i0, i1 - i0);
  }
}

bool is_packed_placeholder(const Tensor& t) {
  std::lock_guard<std::mutex> lock(g_pack_mu);
  return g_prepacked.count(t.raw()) != 0;
}

bool multiplies_by_packed(const OpKernel* kernel, int index, const Tensor& weight) {
  if (const auto* d = dynamic_cast<const DotKernel*>(kernel)) return index == 1 && d->packed_for(weight);
  if (const auto* g = dynamic_cast<const GroupedDotKernel*>(kernel))
    return index >= 1 && size_t(index) <= g->members.size() && g->members[size_t(index) - 1]->packed_for(weight);
  return false;
}

Result<std::unique_ptr<OpKernel>> compile_grouped_dot(const std::vector<const shlo::Op*>& ops,
                                                      const shlo::Function& fn) {
  auto k = std::make_unique<GroupedDotKernel>();
  for (const shlo::Op* op : ops) {
    if (op->name != "stablehlo.dot_general" || op->operands.size() != 2 || op->operands[0] != ops[0]->operands[0])
      return make_error(ErrorKind::kUnsupported, "grouped dot: ", op->name, " does not read the group's left operand");
    HLX_ASSIGN_OR_RETURN(auto member, make_dot(*op, fn));
    k->members.emplace_back(static_cast<DotKernel*>(member.release()));
    const kernels::MatmulDesc &d = k->members.back()->desc, &d0 = k->members[0]->desc;
    if (d.batch != 1 || d.m != d0.m || d.k != d0.k || d.a_type != d0.a_type || d.c_type != d0.c_type)
      return make_error(ErrorKind::kUnsupported, "grouped dot: ", types_of(*op, fn), " differs from ",
                        types_of(*ops[0], fn), " in batch, M, K or types");
  }
  return std::unique_ptr<OpKernel>(std::move(k));
}

namespace {

// ---------------------------------------------------------------- composites

const Attr* composite_attrs(const shlo::Op& op) {
  const Attr* a = op.attr("composite_attributes");
  return a && a->kind == Attr::Kind::kDict ? a : nullptr;
}

Result<float> float_attr(const shlo::Op& op, const shlo::Function& fn, const char* comp, const char* name) {
  const Attr* d = composite_attrs(op);
  const Attr* a = d ? d->find(name) : nullptr;
  if (!a || a->kind != Attr::Kind::kFloat)
    return invalid(comp, op, fn, "composite attribute '", name, "' must be a float");
  return float(a->f);
}
Result<bool> bool_attr(const shlo::Op& op, const shlo::Function& fn, const char* comp, const char* name) {
  const Attr* d = composite_attrs(op);
  const Attr* a = d ? d->find(name) : nullptr;
  if (!a || a->kind != Attr::Kind::kBool)
    return invalid(comp, op, fn, "composite attribute '", name, "' must be a bool");
  return a->b;
}
Result<int64_t> int_attr(const shlo::Op& op, const shlo::Function& fn, const char* comp, const char* name) {
  const Attr* d = composite_attrs(op);
  const Attr* a = d ? d->find(name) : nullptr;
  if (!a || a->kind != Attr::Kind::kInt)
    return invalid(comp, op, fn, "composite attribute '", name, "' must be an integer");
  return a->i;
}

bool is_act(DType t) { return t == DType::kF32 || t == DType::kBF16; }
bool is_weight(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

Status check_arity(const char* comp, const shlo::Op& op, const shlo::Function& fn, size_t operands) {
  if (op.operands.size() != operands || op.results.size() != 1)
    return invalid(comp, op, fn, "expects ", operands, " operands and 1 result");
  return ok_status();
}

class RmsNormKernel final : public OpKernel {
 public:
  int64_t rows = 0, dim = 0;
  DType x_type{}, w_type{};
  float eps = 0, offset = 0;
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    return kernels::rms_norm(rows, dim, x_type, in[0]->raw(), w_type, in[1]->raw(), eps, offset, out[0]->raw());
  }
  bool can_run_in_place(int index) const override { return index == 0; }
};

class LayerNormKernel final : public OpKernel {
 public:
  int64_t rows = 0, dim = 0;
  DType x_type{}, w_type{};
  float eps = 0;
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    return kernels::layer_norm(rows, dim, x_type, in[0]->raw(), w_type, in[1]->raw(), in[2]->raw(), eps, out[0]->raw());
  }
  bool can_run_in_place(int index) const override { return index == 0; }
};

// Shared checks of the norms: x [..., D] of F, weight (and bias) [D] of W, result = x's type.
Status check_norm(const char* comp, const shlo::Op& op, const shlo::Function& fn, size_t operands, int64_t& rows,
                  int64_t& dim) {
  HLX_RETURN_IF_ERROR(check_arity(comp, op, fn, operands));
  const TensorType& x = fn.type_of(op.operands[0]);
  if (!is_act(x.dtype) || x.rank() < 1) return invalid(comp, op, fn, "x must be f32/bf16 of rank >= 1");
  dim = x.shape.back();
  rows = num_elements(x.shape) / std::max<int64_t>(dim, 1);
  if (dim <= 0) return invalid(comp, op, fn, "last dimension must be positive");
  for (size_t i = 1; i < operands; ++i) {
    const TensorType& w = fn.type_of(op.operands[i]);
    if (!is_weight(w.dtype) || w.shape != Shape{dim} || w.dtype != fn.type_of(op.operands[1]).dtype)
      return invalid(comp, op, fn, "operand ", i, " must be [", dim, "] of f32/bf16/f16 (same type as weight)");
  }
  if (fn.type_of(op.results[0]) != x) return invalid(comp, op, fn, "result must have x's type");
  return ok_status();
}

Result<std::unique_ptr<OpKernel>> make_rms_norm(const shlo::Op& op, const shlo::Function& fn) {
  auto k = std::make_unique<RmsNormKernel>();
  HLX_RETURN_IF_ERROR(check_norm("hlx.rms_norm", op, fn, 2, k->rows, k->dim));
  HLX_ASSIGN_OR_RETURN(k->eps, float_attr(op, fn, "hlx.rms_norm", "epsilon"));
  HLX_ASSIGN_OR_RETURN(k->offset, float_attr(op, fn, "hlx.rms_norm", "weight_offset"));
  k->x_type = fn.type_of(op.operands[0]).dtype;
  k->w_type = fn.type_of(op.operands[1]).dtype;
  return std::unique_ptr<OpKernel>(std::move(k));
}

Result<std::unique_ptr<OpKernel>> make_layer_norm(const shlo::Op& op, const shlo::Function& fn) {
  auto k = std::make_unique<LayerNormKernel>();
  HLX_RETURN_IF_ERROR(check_norm("hlx.layer_norm", op, fn, 3, k->rows, k->dim));
  HLX_ASSIGN_OR_RETURN(k->eps, float_attr(op, fn, "hlx.layer_norm", "epsilon"));
  k->x_type = fn.type_of(op.operands[0]).dtype;
  k->w_type = fn.type_of(op.operands[1]).dtype;
  return std::unique_ptr<OpKernel>(std::move(k));
}

class RotaryKernel final : public OpKernel {
 public:
  int64_t rows = 0, heads = 0, head_dim = 0, rotary_dim = 0;
  DType x_type{};
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    return kernels::rotary(rows, heads, head_dim, rotary_dim, x_type, in[0]->raw(), in[1]->data<int32_t>(),
                           in[2]->data<float>(), out[0]->raw());
  }
  bool can_run_in_place(int index) const override { return index == 0; }
};

Result<std::unique_ptr<OpKernel>> make_rotary(const shlo::Op& op, const shlo::Function& fn) {
  const char* C = "hlx.rotary";
  HLX_RETURN_IF_ERROR(check_arity(C, op, fn, 3));
  const TensorType& x = fn.type_of(op.operands[0]);
  const TensorType& pos = fn.type_of(op.operands[1]);
  const TensorType& inv = fn.type_of(op.operands[2]);
  if (!is_act(x.dtype) || x.rank() != 3) return invalid(C, op, fn, "x must be [T, H, Dh] of f32/bf16");
  if (pos.dtype != DType::kI32 || pos.shape != Shape{x.shape[0]})
    return invalid(C, op, fn, "positions must be [", x.shape[0], "] of i32");
  if (inv.dtype != DType::kF32 || inv.rank() != 1 || 2 * inv.shape[0] > x.shape[2])
    return invalid(C, op, fn, "inv_freq must be [R/2] of f32 with R <= head_dim ", x.shape[2]);
  if (fn.type_of(op.results[0]) != x) return invalid(C, op, fn, "result must have x's type");
  auto k = std::make_unique<RotaryKernel>();
  k->rows = x.shape[0];
  k->heads = x.shape[1];
  k->head_dim = x.shape[2];
  k->rotary_dim = 2 * inv.shape[0];
  k->x_type = x.dtype;
  return std::unique_ptr<OpKernel>(std::move(k));
}

class AttentionKernel final : public OpKernel {
 public:
  kernels::AttentionDesc d;
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    kernels::AttentionDesc dc = d;
    if (d.kv_type == DType::kI8) {  // the scale operands follow kv_len (and the bias)
      const size_t s0 = d.has_bias ? 7 : 6;
      dc.k_scale = in[s0]->data<float>();
      dc.v_scale = in[s0 + 1]->data<float>();
    }
    return kernels::attention(dc, in[0]->raw(), in[1]->raw(), in[2]->raw(), in[3]->data<int32_t>(),
                              in[4]->data<int32_t>(), in[5]->data<int32_t>(),
                              d.has_bias ? in[6]->data<float>() : nullptr, out[0]->data<float>());
  }
};

Result<std::unique_ptr<OpKernel>> make_attention(const shlo::Op& op, const shlo::Function& fn) {
  const char* C = "hlx.attention";
  auto k = std::make_unique<AttentionKernel>();
  kernels::AttentionDesc& d = k->d;
  HLX_ASSIGN_OR_RETURN(d.scale, float_attr(op, fn, C, "scale"));
  HLX_ASSIGN_OR_RETURN(d.causal, bool_attr(op, fn, C, "causal"));
  HLX_ASSIGN_OR_RETURN(d.sliding_window, int_attr(op, fn, C, "sliding_window"));
  HLX_ASSIGN_OR_RETURN(d.logit_softcap, float_attr(op, fn, C, "logit_softcap"));
  HLX_ASSIGN_OR_RETURN(d.has_bias, bool_attr(op, fn, C, "has_bias"));
  const TensorType& q = fn.type_of(op.operands[0]);
  const TensorType& kc = fn.type_of(op.operands[1]);
  const TensorType& vc = fn.type_of(op.operands[2]);
  const bool i8 = kc.dtype == DType::kI8;  // int8 KV: k_scale, v_scale operands at the end
  HLX_RETURN_IF_ERROR(check_arity(C, op, fn, (d.has_bias ? 7 : 6) + (i8 ? 2 : 0)));
  if (!is_act(q.dtype) || q.rank() != 4) return invalid(C, op, fn, "q must be [B, T, Hq, Dh] of f32/bf16");
  if (!(is_act(kc.dtype) || i8) || kc.rank() != 4 || vc != kc)
    return invalid(C, op, fn, "k_cache and v_cache must both be [N, S, Hkv, Dh] of the same f32/bf16/i8 type");
  if (i8) {
    const TensorType want_scale{DType::kF32, {kc.shape[0], kc.shape[1], kc.shape[2]}};
    const size_t s0 = d.has_bias ? 7 : 6;
    if (fn.type_of(op.operands[s0]) != want_scale || fn.type_of(op.operands[s0 + 1]) != want_scale)
      return invalid(C, op, fn, "k_scale and v_scale of an i8 cache must be ", want_scale.to_string());
  }
  d.batch = q.shape[0];
  d.q_len = q.shape[1];
  d.q_heads = q.shape[2];
  d.head_dim = q.shape[3];
  d.num_slots = kc.shape[0];
  d.capacity = kc.shape[1];
  d.kv_heads = kc.shape[2];
  d.q_type = q.dtype;
  d.kv_type = kc.dtype;
  if (kc.shape[3] != d.head_dim)
    return invalid(C, op, fn, "cache head_dim ", kc.shape[3], " != q head_dim ", d.head_dim);
  if (d.kv_heads <= 0 || d.q_heads % d.kv_heads != 0)
    return invalid(C, op, fn, "q heads ", d.q_heads, " not a multiple of kv heads ", d.kv_heads);
  const TensorType want_i32_b{DType::kI32, {d.batch}};
  const TensorType want_pos{DType::kI32, {d.batch, d.q_len}};
  if (fn.type_of(op.operands[3]) != want_i32_b) return invalid(C, op, fn, "slot must be ", want_i32_b.to_string());
  if (fn.type_of(op.operands[4]) != want_pos) return invalid(C, op, fn, "q_pos must be ", want_pos.to_string());
  if (fn.type_of(op.operands[5]) != want_i32_b) return invalid(C, op, fn, "kv_len must be ", want_i32_b.to_string());
  if (d.has_bias) {
    const TensorType want_bias{DType::kF32, {d.batch, d.q_len, d.capacity}};
    if (fn.type_of(op.operands[6]) != want_bias) return invalid(C, op, fn, "bias must be ", want_bias.to_string());
  }
  const TensorType want_out{DType::kF32, q.shape};
  if (fn.type_of(op.results[0]) != want_out) return invalid(C, op, fn, "result must be ", want_out.to_string());
  if (d.sliding_window < 0 || d.logit_softcap < 0)
    return invalid(C, op, fn, "sliding_window=", d.sliding_window, " and logit_softcap=", d.logit_softcap,
                   " must be >= 0");
  return std::unique_ptr<OpKernel>(std::move(k));
}

}  // namespace

void register_native_kernels(KernelRegistry& r) {
  r.add("stablehlo.dot_general", make_dot);
  r.add("composite:hlx.attention", make_attention);
  r.add("composite:hlx.rms_norm", make_rms_norm);
  r.add("composite:hlx.layer_norm", make_layer_norm);
  r.add("composite:hlx.rotary", make_rotary);
}

}  // namespace hlx::rt
