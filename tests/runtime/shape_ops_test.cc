// Shape kernels against plain per-element loops written here from the spec's index formulas
// (one output element at a time, multi-index arithmetic, no strides or block copies), over
// several element sizes, edge shapes (rank 0, zero-size and size-1 dims) and error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "runtime/op_kernel.h"

namespace hlx::rt {
namespace {

using shlo::Attr;
using shlo::AttrDict;
using shlo::TensorType;

const DType kTypes[] = {DType::kF32, DType::kBF16, DType::kI64, DType::kI8, DType::kI1};

Tensor random_tensor(DType t, Shape s, std::mt19937& rng) {
  Tensor x = Tensor::empty(t, std::move(s));
  auto* p = static_cast<uint8_t*>(x.raw());
  for (size_t i = 0; i < x.nbytes(); ++i) p[i] = t == DType::kI1 ? uint8_t(rng() & 1) : uint8_t(rng());
  return x;
}

Tensor scalar_index(DType t, int64_t v) {
  Tensor x = Tensor::empty(t, {});
  switch (t) {
    case DType::kI64:
      *x.data<int64_t>() = v;
      break;
    case DType::kI32:
      *x.data<int32_t>() = int32_t(v);
      break;
    case DType::kI16:
      *x.data<int16_t>() = int16_t(v);
      break;
    case DType::kI8:
      *x.data<int8_t>() = int8_t(v);
      break;
    default:
      *x.data<uint8_t>() = uint8_t(v);
      break;
  }
  return x;
}

struct Run {
  shlo::Function fn;
  shlo::Op op;
  Result<std::unique_ptr<OpKernel>> kernel = Status(ErrorKind::kInternal, "not compiled");
};

std::unique_ptr<Run> compile(const std::string& name, const std::vector<TensorType>& ins, const TensorType& out,
                             AttrDict attrs) {
  auto r = std::make_unique<Run>();
  r->op.name = name;
  for (const auto& t : ins) r->op.operands.push_back(r->fn.new_value(t));
  r->op.results.push_back(r->fn.new_value(out));
  r->op.attrs = std::move(attrs);
  r->kernel = KernelRegistry::builtin().compile(name, r->op, r->fn);
  return r;
}

Result<Tensor> run(const std::string& name, const std::vector<Tensor>& ins, const TensorType& out, AttrDict attrs) {
  std::vector<TensorType> types;
  for (const auto& t : ins) types.push_back({t.dtype(), t.shape()});
  auto r = compile(name, types, out, std::move(attrs));
  if (!r->kernel.ok()) return r->kernel.status();
  Tensor y = Tensor::empty(out.dtype, out.shape);
  std::memset(y.raw(), 0xAB, y.nbytes());  // garbage: every element must be written
  std::vector<const Tensor*> in;
  for (const auto& t : ins) in.push_back(&t);
  HLX_RETURN_IF_ERROR((*r->kernel)->run(in, {&y}));
  return y;
}

// Index helpers for the reference loops.
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    idx[k] = i % s[k];
    i /= s[k];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t i = 0;
  for (size_t k = 0; k < s.size(); ++k) i = i * s[k] + idx[k];
  return i;
}
const uint8_t* elem(const Tensor& t, int64_t i) {
  return static_cast<const uint8_t*>(t.raw()) + i * int64_t(dtype_size(t.dtype()));
}

// Builds the expected tensor: source(out_index) returns the bytes each output element must hold.
Tensor reference(DType t, const Shape& s, const std::function<const uint8_t*(const std::vector<int64_t>&)>& source) {
  Tensor y = Tensor::empty(t, s);
  for (int64_t i = 0; i < y.num_elements(); ++i)
    std::memcpy(static_cast<uint8_t*>(y.raw()) + i * int64_t(dtype_size(t)), source(unravel(i, s)), dtype_size(t));
  return y;
}

void expect_same(const Result<Tensor>& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  ASSERT_EQ(got->shape(), want.shape()) << what;
  ASSERT_EQ(got->nbytes(), want.nbytes()) << what;
  EXPECT_EQ(std::memcmp(got->raw(), want.raw(), want.nbytes()), 0) << what;
}

TEST(ShapeOps, Constant) {
  for (DType t : kTypes) {
    std::mt19937 rng(1);
    Tensor v = random_tensor(t, {2, 3}, rng);
    shlo::DenseElements d{{t, {2, 3}}, std::vector<uint8_t>(elem(v, 0), elem(v, 6))};
    expect_same(run("stablehlo.constant", {}, {t, {2, 3}}, {{"value", Attr::dense_elements(d)}}), v, "constant");
  }
  shlo::DenseElements wrong{{DType::kF32, {2}}, {}};
  wrong.bytes.resize(8);
  auto r = compile("stablehlo.constant", {}, {DType::kF32, {3}}, {{"value", Attr::dense_elements(wrong)}});
  EXPECT_EQ(r->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto missing = compile("stablehlo.constant", {}, {DType::kF32, {3}}, {});
  EXPECT_EQ(missing->kernel.status().kind(), ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, IotaEveryTypeAndDimension) {
  Shape s{3, 4, 2};
  for (DType t : kAllDTypes)
    for (int64_t d = 0; d < 3; ++d) {
      auto y = run("stablehlo.iota", {}, {t, s}, {{"iota_dimension", Attr::integer(d)}});
      ASSERT_TRUE(y.ok()) << y.status().to_string();
      for (int64_t i = 0; i < y->num_elements(); ++i) {
        int64_t want = unravel(i, s)[size_t(d)];
        double got = 0;
        switch (t) {
          case DType::kF32:
            got = y->data<float>()[i];
            break;
          case DType::kF16:
            got = f16_to_f32(y->data<f16>()[i]);
            break;
          case DType::kBF16:
            got = bf16_to_f32(y->data<bf16>()[i]);
            break;
          case DType::kI64:
            got = double(y->data<int64_t>()[i]);
            break;
          case DType::kI32:
            got = y->data<int32_t>()[i];
            break;
          case DType::kI16:
            got = y->data<int16_t>()[i];
            break;
          case DType::kI8:
            got = y->data<int8_t>()[i];
            break;
          case DType::kU8:
            got = y->data<uint8_t>()[i];
            break;
          case DType::kI1:
            got = y->data<uint8_t>()[i];
            want = want != 0;
            break;
        }
        ASSERT_EQ(got, double(want)) << dtype_name(t) << " dim " << d << " element " << i;
      }
    }
  EXPECT_EQ(
      compile("stablehlo.iota", {}, {DType::kF32, {3}}, {{"iota_dimension", Attr::integer(1)}})->kernel.status().kind(),
      ErrorKind::kInvalidArgument);
  // bf16 iota rounds large indices once (257 -> 256, ties to even).
  auto big = run("stablehlo.iota", {}, {DType::kBF16, {300}}, {{"iota_dimension", Attr::integer(0)}});
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(bf16_to_f32(big->data<bf16>()[257]), 256.0f);
  EXPECT_EQ(bf16_to_f32(big->data<bf16>()[259]), 260.0f);
}

TEST(ShapeOps, ReshapeAndInPlace) {
  std::mt19937 rng(2);
  Tensor x = random_tensor(DType::kI16, {2, 3, 4}, rng);
  auto y = run("stablehlo.reshape", {x}, {DType::kI16, {4, 6}}, {});
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(std::memcmp(y->raw(), x.raw(), x.nbytes()), 0);
  auto r = compile("stablehlo.reshape", {{DType::kI16, {2, 3, 4}}}, {DType::kI16, {24}}, {});
  ASSERT_TRUE(r->kernel.ok());
  EXPECT_TRUE((*r->kernel)->can_run_in_place(0));
  Tensor alias = Tensor::borrow(DType::kI16, {24}, x.raw(), x.storage());
  Tensor before = x.clone();
  ASSERT_TRUE((*r->kernel)->run({&x}, {&alias}).ok());
  EXPECT_EQ(std::memcmp(before.raw(), x.raw(), x.nbytes()), 0);
  EXPECT_EQ(compile("stablehlo.reshape", {{DType::kI16, {2, 3}}}, {DType::kI16, {7}}, {})->kernel.status().kind(),
            ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, BroadcastInDim) {
  struct C {
    Shape in, out;
    std::vector<int64_t> dims;
  };
  std::vector<C> cases = {
      {{}, {2, 3}, {}},             // scalar
      {{3}, {2, 3}, {1}},           // row
      {{2}, {2, 3}, {0}},           // column
      {{1, 3}, {4, 3}, {0, 1}},     // size-1 dim expands
      {{3, 2}, {2, 5, 3}, {2, 0}},  // transposing broadcast
      {{2, 1, 4}, {2, 3, 4}, {0, 1, 2}},
      {{0, 4}, {3, 0, 4}, {1, 2}},  // zero-size
      {{1}, {1, 1, 1}, {1}},
  };
  std::mt19937 rng(3);
  for (DType t : kTypes)
    for (const auto& c : cases) {
      Tensor x = random_tensor(t, c.in, rng);
      Tensor want = reference(t, c.out, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> i(c.in.size());
        for (size_t k = 0; k < c.in.size(); ++k) i[k] = c.in[k] == 1 ? 0 : o[size_t(c.dims[k])];
        return elem(x, ravel(i, c.in));
      });
      expect_same(
          run("stablehlo.broadcast_in_dim", {x}, {t, c.out}, {{"broadcast_dimensions", Attr::i64_array(c.dims)}}), want,
          "broadcast_in_dim " + shape_to_string(c.in) + " -> " + shape_to_string(c.out));
    }
  auto bad = [](Shape in, Shape out, std::vector<int64_t> dims) {
    return compile("stablehlo.broadcast_in_dim", {{DType::kF32, in}}, {DType::kF32, out},
                   {{"broadcast_dimensions", Attr::i64_array(dims)}})
        ->kernel.status()
        .kind();
  };
  EXPECT_EQ(bad({3}, {2, 3}, {0}), ErrorKind::kInvalidArgument);        // 3 vs 2
  EXPECT_EQ(bad({3}, {2, 3}, {2}), ErrorKind::kInvalidArgument);        // out of range
  EXPECT_EQ(bad({3, 3}, {3, 3}, {1, 1}), ErrorKind::kInvalidArgument);  // repeated
  EXPECT_EQ(bad({3}, {2, 3}, {}), ErrorKind::kInvalidArgument);         // wrong size
  EXPECT_EQ(
      compile("stablehlo.broadcast_in_dim", {{DType::kF32, {3}}}, {DType::kF32, {2, 3}}, {})->kernel.status().kind(),
      ErrorKind::kInvalidArgument);  // missing attribute
}

TEST(ShapeOps, Transpose) {
  struct C {
    Shape in;
    std::vector<int64_t> perm;
  };
  std::vector<C> cases = {{{}, {}},
                          {{2, 3}, {1, 0}},
                          {{2, 3, 4}, {2, 0, 1}},
                          {{2, 3, 4}, {0, 2, 1}},
                          {{1, 5, 1, 3}, {3, 1, 0, 2}},
                          {{0, 3}, {1, 0}},
                          {{67, 129}, {1, 0}}};
  std::mt19937 rng(4);
  for (DType t : kTypes)
    for (const auto& c : cases) {
      Shape out(c.in.size());
      for (size_t k = 0; k < out.size(); ++k) out[k] = c.in[size_t(c.perm[k])];
      Tensor x = random_tensor(t, c.in, rng);
      Tensor want = reference(t, out, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> i(c.in.size());
        for (size_t k = 0; k < o.size(); ++k) i[size_t(c.perm[k])] = o[k];
        return elem(x, ravel(i, c.in));
      });
      expect_same(run("stablehlo.transpose", {x}, {t, out}, {{"permutation", Attr::i64_array(c.perm)}}), want,
                  "transpose " + shape_to_string(c.in));
    }
  EXPECT_EQ(compile("stablehlo.transpose", {{DType::kF32, {2, 3}}}, {DType::kF32, {3, 2}},
                    {{"permutation", Attr::i64_array({0, 0})}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, Slice) {
  struct C {
    Shape in;
    std::vector<int64_t> start, limit, step;
  };
  std::vector<C> cases = {{{}, {}, {}, {}},
                          {{10}, {2}, {9}, {3}},
                          {{5, 6}, {1, 0}, {4, 6}, {1, 2}},
                          {{4, 5, 6}, {0, 1, 2}, {4, 5, 6}, {2, 3, 1}},
                          {{4, 5}, {2, 2}, {2, 5}, {1, 1}},  // empty
                          {{3, 1, 7}, {1, 0, 6}, {2, 1, 7}, {1, 1, 1}}};
  std::mt19937 rng(5);
  for (DType t : kTypes)
    for (const auto& c : cases) {
      Shape out(c.in.size());
      for (size_t k = 0; k < out.size(); ++k) out[k] = (c.limit[k] - c.start[k] + c.step[k] - 1) / c.step[k];
      Tensor x = random_tensor(t, c.in, rng);
      Tensor want = reference(t, out, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> i(o.size());
        for (size_t k = 0; k < o.size(); ++k) i[k] = c.start[k] + o[k] * c.step[k];
        return elem(x, ravel(i, c.in));
      });
      expect_same(run("stablehlo.slice", {x}, {t, out},
                      {{"start_indices", Attr::i64_array(c.start)},
                       {"limit_indices", Attr::i64_array(c.limit)},
                       {"strides", Attr::i64_array(c.step)}}),
                  want, "slice " + shape_to_string(c.in));
    }
  auto bad = compile("stablehlo.slice", {{DType::kF32, {4}}}, {DType::kF32, {2}},
                     {{"start_indices", Attr::i64_array({3})},
                      {"limit_indices", Attr::i64_array({5})},
                      {"strides", Attr::i64_array({1})}});
  EXPECT_EQ(bad->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto zero_stride = compile("stablehlo.slice", {{DType::kF32, {4}}}, {DType::kF32, {2}},
                             {{"start_indices", Attr::i64_array({0})},
                              {"limit_indices", Attr::i64_array({2})},
                              {"strides", Attr::i64_array({0})}});
  EXPECT_EQ(zero_stride->kernel.status().kind(), ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, DynamicSliceClampsStarts) {
  Shape in{5, 7};
  Shape sz{2, 3};
  std::mt19937 rng(6);
  const std::vector<std::pair<int64_t, int64_t>> starts = {{0, 0}, {1, 2}, {3, 4}, {4, 6}, {-3, 100}, {100, -1}};
  for (DType t : kTypes)
    for (DType it : {DType::kI64, DType::kI32, DType::kI16, DType::kI8, DType::kU8})
      for (auto [a, b] : starts) {
        if (it == DType::kU8 && (a < 0 || b < 0)) continue;
        Tensor x = random_tensor(t, in, rng);
        int64_t ca = std::clamp<int64_t>(a, 0, in[0] - sz[0]), cb = std::clamp<int64_t>(b, 0, in[1] - sz[1]);
        Tensor want = reference(t, sz, [&](const std::vector<int64_t>& o) {
          return elem(x, ravel({ca + o[0], cb + o[1]}, in));
        });
        expect_same(run("stablehlo.dynamic_slice", {x, scalar_index(it, a), scalar_index(it, b)}, {t, sz},
                        {{"slice_sizes", Attr::i64_array(sz)}}),
                    want, str_cat("dynamic_slice start ", a, ",", b, " index type ", dtype_name(it)));
      }
  // Rank 0 and zero-size slices.
  Tensor s0 = random_tensor(DType::kF32, {}, rng);
  expect_same(run("stablehlo.dynamic_slice", {s0}, {DType::kF32, {}}, {{"slice_sizes", Attr::i64_array({})}}), s0,
              "rank 0");
  auto empty = run("stablehlo.dynamic_slice", {random_tensor(DType::kF32, {3}, rng), scalar_index(DType::kI32, 5)},
                   {DType::kF32, {0}}, {{"slice_sizes", Attr::i64_array({0})}});
  EXPECT_TRUE(empty.ok());
  // Errors: too large a slice, missing index, float index.
  EXPECT_EQ(compile("stablehlo.dynamic_slice", {{DType::kF32, {3}}, {DType::kI32, {}}}, {DType::kF32, {4}},
                    {{"slice_sizes", Attr::i64_array({4})}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(compile("stablehlo.dynamic_slice", {{DType::kF32, {3, 3}}, {DType::kI32, {}}}, {DType::kF32, {1, 1}},
                    {{"slice_sizes", Attr::i64_array({1, 1})}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(compile("stablehlo.dynamic_slice", {{DType::kF32, {3}}, {DType::kF32, {}}}, {DType::kF32, {1}},
                    {{"slice_sizes", Attr::i64_array({1})}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, DynamicUpdateSliceCopyAndInPlace) {
  Shape in{4, 6, 3};
  Shape up{2, 3, 3};
  std::mt19937 rng(7);
  const std::vector<std::array<int64_t, 3>> starts = {{0, 0, 0}, {1, 2, 0}, {2, 3, 0}, {9, -4, 1}, {-1, 5, 2}};
  for (DType t : kTypes)
    for (auto s : starts) {
      Tensor x = random_tensor(t, in, rng), u = random_tensor(t, up, rng);
      int64_t c[3];
      for (int k = 0; k < 3; ++k) c[k] = std::clamp<int64_t>(s[size_t(k)], 0, in[size_t(k)] - up[size_t(k)]);
      Tensor want = reference(t, in, [&](const std::vector<int64_t>& o) {
        bool inside = true;
        std::vector<int64_t> ui(3);
        for (int k = 0; k < 3; ++k) {
          ui[size_t(k)] = o[size_t(k)] - c[k];
          inside = inside && ui[size_t(k)] >= 0 && ui[size_t(k)] < up[size_t(k)];
        }
        return inside ? elem(u, ravel(ui, up)) : elem(x, ravel(o, in));
      });
      std::vector<Tensor> args = {x, u, scalar_index(DType::kI32, s[0]), scalar_index(DType::kI32, s[1]),
                                  scalar_index(DType::kI32, s[2])};
      expect_same(run("stablehlo.dynamic_update_slice", args, {t, in}, {}), want, "dynamic_update_slice copy");

      // In place: the output is the operand's buffer.
      std::vector<TensorType> types;
      for (const auto& a : args) types.push_back({a.dtype(), a.shape()});
      auto r = compile("stablehlo.dynamic_update_slice", types, {t, in}, {});
      ASSERT_TRUE(r->kernel.ok());
      EXPECT_TRUE((*r->kernel)->can_run_in_place(0));
      EXPECT_FALSE((*r->kernel)->can_run_in_place(1));
      Tensor buf = x.clone();
      Tensor alias = Tensor::borrow(t, in, buf.raw(), buf.storage());
      std::vector<const Tensor*> ins = {&buf, &args[1], &args[2], &args[3], &args[4]};
      ASSERT_TRUE((*r->kernel)->run(ins, {&alias}).ok());
      EXPECT_EQ(std::memcmp(buf.raw(), want.raw(), want.nbytes()), 0);
    }
  EXPECT_EQ(compile("stablehlo.dynamic_update_slice", {{DType::kF32, {2}}, {DType::kF32, {3}}, {DType::kI32, {}}},
                    {DType::kF32, {2}}, {})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, Concatenate) {
  std::mt19937 rng(8);
  for (DType t : kTypes)
    for (int64_t dim : {0, 1, 2}) {
      std::vector<Shape> ins = {{2, 3, 4}, {2, 3, 4}, {2, 3, 4}};
      ins[0][size_t(dim)] = 1;
      ins[1][size_t(dim)] = 0;  // zero-size operand
      ins[2][size_t(dim)] = 5;
      Shape out = ins[0];
      out[size_t(dim)] = 6;
      std::vector<Tensor> xs;
      for (const auto& s : ins) xs.push_back(random_tensor(t, s, rng));
      Tensor want = reference(t, out, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> i = o;
        size_t which = 0;
        while (i[size_t(dim)] >= ins[which][size_t(dim)]) i[size_t(dim)] -= ins[which++][size_t(dim)];
        return elem(xs[which], ravel(i, ins[which]));
      });
      expect_same(run("stablehlo.concatenate", xs, {t, out}, {{"dimension", Attr::integer(dim)}}), want,
                  str_cat("concatenate dim ", dim));
    }
  EXPECT_EQ(compile("stablehlo.concatenate", {{DType::kF32, {2}}, {DType::kF32, {3}}}, {DType::kF32, {6}},
                    {{"dimension", Attr::integer(0)}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(compile("stablehlo.concatenate", {{DType::kF32, {2}}, {DType::kI32, {3}}}, {DType::kF32, {5}},
                    {{"dimension", Attr::integer(0)}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, PadWithNegativeAndInteriorPadding) {
  struct C {
    Shape in;
    std::vector<int64_t> lo, hi, interior;
  };
  std::vector<C> cases = {
      {{}, {}, {}, {}},
      {{3}, {2}, {1}, {0}},
      {{3}, {0}, {0}, {2}},
      {{4, 3}, {1, -1}, {-2, 2}, {1, 0}},
      {{5}, {-3}, {-1}, {1}},  // negative low crops into interior padding
      {{2, 3, 2}, {0, 1, -1}, {1, -2, 0}, {0, 2, 1}},
      {{3}, {-4}, {0}, {1}},  // crop everything before the last element
      {{0, 2}, {1, 0}, {1, 0}, {3, 0}},
      {{2}, {-2}, {0}, {0}},  // nothing left at all
      {{2}, {-2}, {3}, {0}},  // only padding left
  };
  std::mt19937 rng(9);
  for (DType t : kTypes)
    for (const auto& c : cases) {
      size_t r = c.in.size();
      Shape out(r);
      for (size_t k = 0; k < r; ++k)
        out[k] = c.lo[k] + c.hi[k] + c.in[k] + std::max<int64_t>(c.in[k] - 1, 0) * c.interior[k];
      Tensor x = random_tensor(t, c.in, rng), pv = random_tensor(t, {}, rng);
      Tensor want = reference(t, out, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> i(r);
        for (size_t k = 0; k < r; ++k) {
          int64_t p = o[k] - c.lo[k];
          if (p < 0 || p % (c.interior[k] + 1) != 0 || p / (c.interior[k] + 1) >= c.in[k]) return elem(pv, 0);
          i[k] = p / (c.interior[k] + 1);
        }
        return elem(x, ravel(i, c.in));
      });
      expect_same(run("stablehlo.pad", {x, pv}, {t, out},
                      {{"edge_padding_low", Attr::i64_array(c.lo)},
                       {"edge_padding_high", Attr::i64_array(c.hi)},
                       {"interior_padding", Attr::i64_array(c.interior)}}),
                  want, "pad " + shape_to_string(c.in) + " -> " + shape_to_string(out));
    }
  EXPECT_EQ(compile("stablehlo.pad", {{DType::kF32, {3}}, {DType::kF32, {}}}, {DType::kF32, {3}},
                    {{"edge_padding_low", Attr::i64_array({0})},
                     {"edge_padding_high", Attr::i64_array({0})},
                     {"interior_padding", Attr::i64_array({-1})}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(compile("stablehlo.pad", {{DType::kF32, {3}}, {DType::kF32, {}}}, {DType::kF32, {9}},
                    {{"edge_padding_low", Attr::i64_array({1})},
                     {"edge_padding_high", Attr::i64_array({1})},
                     {"interior_padding", Attr::i64_array({0})}})
                ->kernel.status()
                .kind(),
            ErrorKind::kInvalidArgument);
}

TEST(ShapeOps, LargeCopiesUseThreadsCorrectly) {
  // Above the parallel threshold: transpose and broadcast of ~1M elements.
  std::mt19937 rng(10);
  Shape in{513, 1031};
  Tensor x = random_tensor(DType::kBF16, in, rng);
  Tensor want = reference(DType::kBF16, {1031, 513}, [&](const std::vector<int64_t>& o) {
    return elem(x, ravel({o[1], o[0]}, in));
  });
  expect_same(run("stablehlo.transpose", {x}, {DType::kBF16, {1031, 513}}, {{"permutation", Attr::i64_array({1, 0})}}),
              want, "big transpose");
  Tensor row = random_tensor(DType::kF32, {1031}, rng);
  Tensor want_b = reference(DType::kF32, {600, 1031}, [&](const std::vector<int64_t>& o) { return elem(row, o[1]); });
  expect_same(run("stablehlo.broadcast_in_dim", {row}, {DType::kF32, {600, 1031}},
                  {{"broadcast_dimensions", Attr::i64_array({1})}}),
              want_b, "big broadcast");
}

}  // namespace
}  // namespace hlx::rt
