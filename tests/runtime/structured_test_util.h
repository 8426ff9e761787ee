// Helpers for the structured-kernel and Program tests: build IR by hand, run one kernel, fill
// tensors with random values, and round-trip through numpy (/usr/bin/python3) as an oracle.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/npy.h"
#include "runtime/op_kernel.h"
#include "stablehlo/ir.h"

namespace hlx::testing {

inline shlo::TensorType tt(DType d, Shape s) { return shlo::TensorType{d, std::move(s)}; }

inline float get_f(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kBF16:
      return bf16_to_f32(t.data<bf16>()[i]);
    case DType::kF16:
      return f16_to_f32(t.data<f16>()[i]);
    default:
      return 0.f;
  }
}
inline int64_t get_i(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kI64:
      return t.data<int64_t>()[i];
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI16:
      return t.data<int16_t>()[i];
    case DType::kI8:
      return t.data<int8_t>()[i];
    case DType::kU8:
    case DType::kI1:
      return t.data<uint8_t>()[i];
    default:
      return int64_t(get_f(t, i));
  }
}
inline void set_f(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::kF32:
      t.data<float>()[i] = v;
      break;
    case DType::kBF16:
      t.data<bf16>()[i] = f32_to_bf16(v);
      break;
    case DType::kF16:
      t.data<f16>()[i] = f32_to_f16(v);
      break;
    default:
      break;
  }
}
inline void set_i(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::kI64:
      t.data<int64_t>()[i] = v;
      break;
    case DType::kI32:
      t.data<int32_t>()[i] = int32_t(v);
      break;
    case DType::kI16:
      t.data<int16_t>()[i] = int16_t(v);
      break;
    case DType::kI8:
      t.data<int8_t>()[i] = int8_t(v);
      break;
    case DType::kU8:
      t.data<uint8_t>()[i] = uint8_t(v);
      break;
    case DType::kI1:
      t.data<uint8_t>()[i] = v != 0;
      break;
    default:
      set_f(t, i, float(v));
      break;
  }
}

// Floats uniform in [-2, 2) (exactly representable in the type), integers in [lo, hi].
inline Tensor random_tensor(DType d, Shape s, uint32_t seed, int64_t lo = -5, int64_t hi = 5) {
  Tensor t = Tensor::empty(d, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uf(-2.f, 2.f);
  std::uniform_int_distribution<int64_t> ui(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if (is_float(d))
      set_f(t, i, uf(rng));
    else
      set_i(t, i, d == DType::kI1 ? ui(rng) & 1 : ui(rng));
  }
  return t;
}

template <class T>
Tensor from_vector(DType d, Shape s, const std::vector<T>& v) {
  Tensor t = Tensor::empty(d, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) {
    if (is_float(d))
      set_f(t, int64_t(i), float(v[i]));
    else
      set_i(t, int64_t(i), int64_t(v[i]));
  }
  return t;
}

// A function under construction plus ops appended to its body.
struct IrBuilder {
  shlo::Function fn;
  shlo::ValueId arg(shlo::TensorType t) {
    shlo::ValueId v = fn.new_value(std::move(t));
    fn.args.push_back(v);
    fn.arg_attrs.emplace_back();
    return v;
  }
  shlo::Op& op(std::string name, std::vector<shlo::ValueId> operands, std::vector<shlo::TensorType> results) {
    shlo::Op o;
    o.name = std::move(name);
    o.operands = std::move(operands);
    for (auto& r : results) o.results.push_back(fn.new_value(r));
    fn.body.push_back(std::move(o));
    return fn.body.back();
  }
  // A region `(a, b) -> return name(a, b)` over scalars of `d` (name empty: return b).
  shlo::Block binary_region(const std::string& name, DType d) {
    shlo::Block b;
    b.args = {fn.new_value(tt(d, {})), fn.new_value(tt(d, {}))};
    shlo::ValueId r = b.args[1];
    if (!name.empty()) {
      shlo::Op o;
      o.name = name;
      o.operands = b.args;
      r = fn.new_value(tt(d, {}));
      o.results = {r};
      b.ops.push_back(o);
    }
    shlo::Op ret;
    ret.name = "stablehlo.return";
    ret.operands = {r};
    b.ops.push_back(ret);
    return b;
  }
};

// Only the structured reference kernels (so native overrides do not hide them in tests).
inline const rt::KernelRegistry& structured_registry() {
  static const rt::KernelRegistry r = [] {
    rt::KernelRegistry x;
    rt::register_structured_kernels(x);
    return x;
  }();
  return r;
}

// Compiles `op` with the structured reference kernels and runs it on `inputs`; outputs allocated
// per result.
inline Result<std::vector<Tensor>> run_op(const shlo::Op& op, const shlo::Function& fn,
                                          const std::vector<Tensor>& inputs) {
  HLX_ASSIGN_OR_RETURN(auto k, structured_registry().compile(op.name, op, fn));
  std::vector<Tensor> outs;
  for (auto r : op.results) outs.push_back(Tensor::zeros(fn.type_of(r).dtype, fn.type_of(r).shape));
  std::vector<const Tensor*> in;
  std::vector<Tensor*> out;
  for (auto& t : inputs) in.push_back(&t);
  for (auto& t : outs) out.push_back(&t);
  HLX_RETURN_IF_ERROR(k->run(in, out));
  return outs;
}

inline shlo::Attr ints(std::vector<int64_t> v) { return shlo::Attr::i64_array(std::move(v)); }

// Runs `script` with numpy: inputs are loaded as a0, a1, ... (from .npy), the script must assign
// `out` (a numpy array), which is written back and returned.
inline Result<Tensor> numpy_eval(const std::vector<Tensor>& inputs, const std::string& script) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("hlx_np_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  std::filesystem::create_directories(dir);
  std::string py = "import numpy as np\n";
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::string p = (dir / std::string("a").append(std::to_string(i) + ".npy")).string();
    HLX_RETURN_IF_ERROR(write_npy(p, inputs[i]));
    py += "a";
    py += std::to_string(i) + " = np.load('" + p + "')\n";
  }
  py += script + "\nnp.save('" + (dir / "out.npy").string() + "', np.ascontiguousarray(out))\n";
  std::ofstream((dir / "s.py").string()) << py;
  std::string cmd = "/usr/bin/python3 " + (dir / "s.py").string();
  if (std::system(cmd.c_str()) != 0) return make_error(ErrorKind::kInternal, "numpy script failed: ", script);
  auto r = read_npy((dir / "out.npy").string());
  std::filesystem::remove_all(dir);
  return r;
}

inline bool have_kernel(const char* name) { return rt::KernelRegistry::builtin().has(name); }

}  // namespace hlx::testing
