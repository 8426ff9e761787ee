// stablehlo.gather with the spec's full dimension numbers: offset_dims, collapsed_slice_dims,
// operand_batching_dims, start_indices_batching_dims, start_index_map, index_vector_dim (== rank
// of start_indices means each index is a scalar). Start indices are clamped so the slice stays in
// bounds (gather_c*: "clamp(start, 0, dim - slice_size)"). Data moves as bytes, so every dtype works.
#include <algorithm>
#include <cstring>

#include "runtime/kernels/matmul.h"
#include "runtime/ops/structured_util.h"
#include "runtime/program.h"

namespace hlx::rt {
namespace {

using namespace structured;

struct GatherPlan {
  size_t esize = 0;
  Shape result_shape;
  std::vector<int64_t> bcoef, wcoef;  // per result dim: batch-linear stride / operand stride
  // Batch geometry over start_indices without index_vector_dim.
  Shape si_shape;
  int64_t ivd = 0;
  Shape batch_shape;
  std::vector<int64_t> batch_si_dim;  // start_indices dim of each batch dim
  std::vector<int64_t> start_index_map, op_dims, op_strides, slice_sizes;
  std::vector<std::pair<int64_t, int64_t>> batching;  // (operand dim, batch dim position)
  bool whole_rows = false;  // bf16 [N, K] operand, each result row one operand row (an embedding)
};

class Gather : public OpKernel {
 public:
  explicit Gather(GatherPlan p) : p_(std::move(p)) {}
  Status run(const std::vector<const Tensor*>& in, const std::vector<Tensor*>& out) override {
    const Tensor& operand = *in[0];
    const Tensor& si = *in[1];
    Tensor& y = *out[0];
    int64_t nb = num_elements(p_.batch_shape);
    auto si_str = row_major_strides(p_.si_shape);
    int64_t ivd_stride = p_.ivd < int64_t(p_.si_shape.size()) ? si_str[size_t(p_.ivd)] : 0;
    starts_.assign(size_t(nb), 0);
    std::vector<int64_t> bidx(p_.batch_shape.size(), 0);
    for (int64_t b = 0; b < nb; ++b) {
      int64_t base = 0;
      for (size_t i = 0; i < bidx.size(); ++i) base += bidx[i] * si_str[size_t(p_.batch_si_dim[i])];
      int64_t off = 0;
      for (size_t k = 0; k < p_.start_index_map.size(); ++k) {
        int64_t od = p_.start_index_map[k];
        int64_t v = load_i64(si.raw(), si.dtype(), base + int64_t(k) * ivd_stride);
        int64_t hi = p_.op_dims[size_t(od)] - p_.slice_sizes[size_t(od)];
        v = std::clamp<int64_t>(v, 0, std::max<int64_t>(hi, 0));
        off += v * p_.op_strides[size_t(od)];
      }
      for (auto [od, pos] : p_.batching) off += bidx[size_t(pos)] * p_.op_strides[size_t(od)];
      starts_[size_t(b)] = off;
      for (size_t i = bidx.size(); i-- > 0;) {
        if (++bidx[i] < p_.batch_shape[i]) break;
        bidx[i] = 0;
      }
    }
    const Shape& rs = p_.result_shape;
    int64_t total = num_elements(rs);
    if (total == 0) return ok_status();
    if (p_.whole_rows)  // rows of a tied embedding from its lm_head's packed copy, when exact
      if (auto packed = exact_packed_copy(operand)) {
        const int64_t k = p_.op_dims[1];
        for (size_t b = 0; b < starts_.size(); ++b)
          packed->copy_row(starts_[b] / k, static_cast<uint16_t*>(y.raw()) + int64_t(b) * k);
        return ok_status();
      }
    if (!p_.whole_rows) {
      copy(operand, y, total);
      return ok_status();
    }
    // Whole rows, released as they are read (program.h), so a long prompt never maps much of the table.
    const int64_t k = p_.op_dims[1];
    rows_.resize(starts_.size());
    for (size_t b = 0; b < starts_.size(); ++b) rows_[b] = starts_[b] / k;
    read_table_rows(operand, rows_.data(), rows_.size(), [&](size_t b) {
      std::memcpy(static_cast<uint16_t*>(y.raw()) + int64_t(b) * k,
                  static_cast<const uint16_t*>(operand.raw()) + starts_[b], size_t(k) * 2);
    });
    return ok_status();
  }

 private:
  void copy(const Tensor& operand, Tensor& y, int64_t total) const {
    const Shape& rs = p_.result_shape;
    size_t r = rs.size();
    const uint8_t* src = static_cast<const uint8_t*>(operand.raw());
    uint8_t* dst = static_cast<uint8_t*>(y.raw());
    size_t es = p_.esize;
    if (r == 0) {
      std::memcpy(dst, src + size_t(starts_[0]) * es, es);
      return;
    }
    int64_t inner = rs[r - 1];
    int64_t ib = p_.bcoef[r - 1], iw = p_.wcoef[r - 1];
    std::vector<int64_t> idx(r, 0);
    int64_t bl = 0, wo = 0;
    for (int64_t o = 0; o < total; o += inner) {
      if (ib == 0 && iw == 1) {
        std::memcpy(dst + size_t(o) * es, src + size_t(starts_[size_t(bl)] + wo) * es, size_t(inner) * es);
      } else {
        for (int64_t j = 0; j < inner; ++j)
          std::memcpy(dst + size_t(o + j) * es, src + size_t(starts_[size_t(bl + j * ib)] + wo + j * iw) * es, es);
      }
      for (size_t d = r - 1; d-- > 0;) {
        bl += p_.bcoef[d];
        wo += p_.wcoef[d];
        if (++idx[d] < rs[d]) break;
        bl -= p_.bcoef[d] * rs[d];
        wo -= p_.wcoef[d] * rs[d];
        idx[d] = 0;
      }
    }
  }

  GatherPlan p_;
  std::vector<int64_t> starts_, rows_;
};

bool contains(const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

Result<std::unique_ptr<OpKernel>> make_gather(const shlo::Op& op, const shlo::Function& fn) {
  if (op.operands.size() != 2 || op.results.size() != 1) return invalid(op, fn, "expects 2 operands, 1 result");
  HLX_ASSIGN_OR_RETURN(shlo::GatherDims dn, dimension_numbers(op, "dimension_numbers", shlo::gather_dims_from_attr));
  const auto &offset_dims = dn.offset_dims, &collapsed = dn.collapsed_slice_dims;
  const auto &op_batch = dn.operand_batching_dims, &si_batch = dn.start_indices_batching_dims;
  const auto& sim = dn.start_index_map;
  const int64_t ivd = dn.index_vector_dim;
  HLX_ASSIGN_OR_RETURN(auto slice_sizes, i64_array_attr(op, "slice_sizes", true));
  const auto& ot = fn.type_of(op.operands[0]);
  const auto& st = fn.type_of(op.operands[1]);
  const auto& rt = fn.type_of(op.results[0]);
  if (!is_integer(st.dtype)) return invalid(op, fn, "start_indices must be integers");
  if (rt.dtype != ot.dtype) return invalid(op, fn, "result type differs from operand type");
  int64_t orank = ot.rank(), srank = st.rank();
  if (int64_t(slice_sizes.size()) != orank) return invalid(op, fn, "slice_sizes size != operand rank");
  if (ivd < 0 || ivd > srank) return invalid(op, fn, str_cat("index_vector_dim ", ivd, " out of range"));
  int64_t nidx = ivd < srank ? st.shape[size_t(ivd)] : 1;
  if (int64_t(sim.size()) != nidx) return invalid(op, fn, "start_index_map size != index vector size");
  if (op_batch.size() != si_batch.size()) return invalid(op, fn, "batching dims lists differ in length");
  for (int64_t d = 0; d < orank; ++d)
    if (slice_sizes[size_t(d)] < 0 || slice_sizes[size_t(d)] > std::max<int64_t>(ot.shape[size_t(d)], 0) ||
        ((contains(collapsed, d) || contains(op_batch, d)) && slice_sizes[size_t(d)] > 1))
      return invalid(op, fn, str_cat("bad slice size for operand dimension ", d));
  for (int64_t d : sim)
    if (d < 0 || d >= orank) return invalid(op, fn, "start_index_map out of range");
  for (int64_t d : collapsed)
    if (d < 0 || d >= orank) return invalid(op, fn, "collapsed_slice_dims out of range");
  for (size_t i = 0; i < op_batch.size(); ++i)
    if (op_batch[i] < 0 || op_batch[i] >= orank || si_batch[i] < 0 || si_batch[i] >= srank || si_batch[i] == ivd)
      return invalid(op, fn, "batching dims out of range");
  GatherPlan p;
  p.esize = dtype_size(ot.dtype);
  p.si_shape = st.shape;
  p.ivd = ivd;
  p.op_dims = ot.shape;
  p.op_strides = row_major_strides(ot.shape);
  p.slice_sizes = slice_sizes;
  p.start_index_map = sim;
  for (int64_t d = 0; d < srank; ++d)
    if (d != ivd) {
      p.batch_shape.push_back(st.shape[size_t(d)]);
      p.batch_si_dim.push_back(d);
    }
  for (size_t i = 0; i < op_batch.size(); ++i)
    p.batching.emplace_back(op_batch[i], si_batch[i] < ivd ? si_batch[i] : si_batch[i] - 1);
  std::vector<int64_t> window_dims;
  for (int64_t d = 0; d < orank; ++d)
    if (!contains(collapsed, d) && !contains(op_batch, d)) window_dims.push_back(d);
  if (window_dims.size() != offset_dims.size()) return invalid(op, fn, "offset_dims size mismatch");
  int64_t rrank = int64_t(p.batch_shape.size() + offset_dims.size());
  if (rt.rank() != rrank) return invalid(op, fn, str_cat("result rank must be ", rrank));
  auto bstr = row_major_strides(p.batch_shape);
  Shape expect;
  size_t bi = 0;
  for (int64_t d = 0; d < rrank; ++d) {
    auto it = std::find(offset_dims.begin(), offset_dims.end(), d);
    if (it != offset_dims.end()) {
      int64_t wd = window_dims[size_t(it - offset_dims.begin())];
      expect.push_back(slice_sizes[size_t(wd)]);
      p.bcoef.push_back(0);
      p.wcoef.push_back(p.op_strides[size_t(wd)]);
    } else {
      if (bi >= p.batch_shape.size()) return invalid(op, fn, "offset_dims out of range");
      expect.push_back(p.batch_shape[bi]);
      p.bcoef.push_back(bstr[bi]);
      p.wcoef.push_back(0);
      ++bi;
    }
  }
  if (expect != rt.shape) return invalid(op, fn, str_cat("result shape must be [", shape_to_string(expect), "]"));
  p.result_shape = rt.shape;
  p.whole_rows = ot.dtype == DType::kBF16 && orank == 2 && collapsed == std::vector<int64_t>{0} &&
                 sim == std::vector<int64_t>{0} && op_batch.empty() && slice_sizes[1] == ot.shape[1] &&
                 offset_dims == std::vector<int64_t>{rrank - 1};
  return std::unique_ptr<OpKernel>(new Gather(std::move(p)));
}

}  // namespace

void register_gather_kernels(KernelRegistry& r) { r.add("stablehlo.gather", make_gather); }

}  // namespace hlx::rt
