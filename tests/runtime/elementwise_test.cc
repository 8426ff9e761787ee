// Elementwise kernels against a numpy oracle (Debian's /usr/bin/python3): every op, every element
// type it supports, edge values (NaN, ±inf, ±0, subnormals, INT_MIN, max, divide by zero) and
// random bit patterns. The oracle writes its own integer semantics with Python ints (wrap-around
// by masking), and float semantics with numpy in f32/f64, so it shares no code with the kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <xmmintrin.h>

#include "runtime/kernels/vexp.h"
#include "runtime/op_kernel.h"

namespace hlx::rt {
namespace {

namespace fs = std::filesystem;
using shlo::Attr;
using shlo::AttrDict;
using shlo::TensorType;

// ---------------------------------------------------------------- building and running one op

struct Compiled {
  shlo::Function fn;
  shlo::Op op;
  Result<std::unique_ptr<OpKernel>> kernel = Status(ErrorKind::kInternal, "not compiled");
};

std::unique_ptr<Compiled> compile_op(const std::string& name, const std::vector<TensorType>& ins, const TensorType& out,
                                     AttrDict attrs = {}) {
  auto c = std::make_unique<Compiled>();
  c->op.name = name;
  for (const auto& t : ins) c->op.operands.push_back(c->fn.new_value(t));
  c->op.results.push_back(c->fn.new_value(out));
  c->op.attrs = std::move(attrs);
  c->kernel = KernelRegistry::builtin().compile(name, c->op, c->fn);
  return c;
}

Result<Tensor> run_op(const std::string& name, const std::vector<Tensor>& ins, const TensorType& out,
                      AttrDict attrs = {}) {
  std::vector<TensorType> types;
  for (const auto& t : ins) types.push_back({t.dtype(), t.shape()});
  auto c = compile_op(name, types, out, std::move(attrs));
  if (!c->kernel.ok()) return c->kernel.status();
  Tensor y = Tensor::empty(out.dtype, out.shape);
  std::vector<const Tensor*> in;
  for (const auto& t : ins) in.push_back(&t);
  HLX_RETURN_IF_ERROR((*c->kernel)->run(in, {&y}));
  return y;
}

Tensor from_bytes(DType t, Shape s, const std::vector<uint8_t>& b) {
  Tensor x = Tensor::empty(t, std::move(s));
  if (!b.empty()) std::memcpy(x.raw(), b.data(), b.size());
  return x;
}

// ---------------------------------------------------------------- input values

template <class T>
void push(std::vector<uint8_t>& b, T v) {
  size_t n = b.size();
  b.resize(n + sizeof(T));
  std::memcpy(&b[n], &v, sizeof(T));
}

const std::vector<float>& float_edges() {
  static const std::vector<float> v = {0.0f,           -0.0f,          1.0f,
                                       -1.0f,          0.5f,           -0.5f,
                                       1.5f,           2.5f,           -2.5f,
                                       3.0f,           -7.25f,         100.0f,
                                       0.1f,           -0.3f,          NAN,
                                       -NAN,           INFINITY,       -INFINITY,
                                       3.4028235e38f,  -3.4028235e38f, 1.17549435e-38f,
                                       1e-45f,         -1e-45f,        1e-40f,
                                       1e10f,          3e9f,           -3e9f,
                                       2147483648.0f,  -2147483904.0f, 9.3e18f,
                                       -9.3e18f,       300.0f,         -129.0f,
                                       255.5f,         65504.0f,       65520.0f,
                                       6.1035156e-05f, 5.9604645e-08f, 2.0f,
                                       88.0f,          -88.0f,         8388609.0f};
  return v;
}

// Edge values plus random values: `count` elements of dtype t.
std::vector<uint8_t> sample_values(DType t, std::mt19937& rng, int random_count) {
  std::vector<uint8_t> b;
  std::uniform_real_distribution<float> uni(-10.0f, 10.0f);
  auto put_float = [&](float f) {
    if (t == DType::kF32)
      push(b, f);
    else if (t == DType::kBF16)
      push(b, f32_to_bf16(f).bits);
    else
      push(b, f32_to_f16(f).bits);
  };
  if (is_float(t)) {
    for (float f : float_edges()) put_float(f);
    if (t == DType::kBF16) push(b, uint16_t(0x0001)), push(b, uint16_t(0x8001)), push(b, uint16_t(0x7f81));
    if (t == DType::kF16) push(b, uint16_t(0x0001)), push(b, uint16_t(0x83ff)), push(b, uint16_t(0x7c01));
    for (int i = 0; i < random_count; ++i) {
      if (i % 3 == 0) {  // raw bit patterns: every class, every exponent
        uint32_t r = rng();
        if (t == DType::kF32)
          push(b, r);
        else
          push(b, uint16_t(r));
      } else {
        put_float(uni(rng));
      }
    }
    return b;
  }
  auto put_int = [&](int64_t v) {
    switch (t) {
      case DType::kI64:
        push(b, v);
        break;
      case DType::kI32:
        push(b, int32_t(uint32_t(v)));
        break;
      case DType::kI16:
        push(b, int16_t(uint16_t(v)));
        break;
      case DType::kI8:
        push(b, int8_t(uint8_t(v)));
        break;
      case DType::kU8:
        push(b, uint8_t(v));
        break;
      default:
        push(b, uint8_t(v & 1));
        break;
    }
  };
  if (t == DType::kI1) {
    for (int i = 0; i < 2 + random_count; ++i) put_int(i < 2 ? i : int64_t(rng() & 1));
    return b;
  }
  int bits = int(dtype_size(t) * 8);
  int64_t mn = is_unsigned(t) ? 0 : (bits == 64 ? INT64_MIN : -(int64_t(1) << (bits - 1)));
  int64_t mx = is_unsigned(t) ? 255 : (bits == 64 ? INT64_MAX : (int64_t(1) << (bits - 1)) - 1);
  for (int64_t v : {int64_t(0), int64_t(1), int64_t(-1), int64_t(2), int64_t(-2), int64_t(3), int64_t(7), int64_t(-5),
                    int64_t(100), int64_t(-100), mn, mx, mn + 1, mx - 1, int64_t(16777217), int64_t(-16777217)})
    put_int(v);
  for (int i = 0; i < random_count; ++i) {
    uint64_t r = (uint64_t(rng()) << 32) | rng();
    put_int(i % 2 ? int64_t(r) : int64_t(r % 11) - 5);
  }
  return b;
}

// Repeats / pairs samples so a binary op sees every edge value against every other.
void cross(const std::vector<uint8_t>& a, size_t es, std::vector<uint8_t>& x, std::vector<uint8_t>& y, size_t limit) {
  size_t n = std::min(a.size() / es, limit);
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) {
      x.insert(x.end(), a.begin() + long(i * es), a.begin() + long((i + 1) * es));
      y.insert(y.end(), a.begin() + long(j * es), a.begin() + long((j + 1) * es));
    }
}

// ---------------------------------------------------------------- the numpy oracle

const char* kOracle = R"PY(
import sys, os, math
import numpy as np
np.seterr(all='ignore')
D = sys.argv[1]
NP = {'f32': np.float32, 'f16': np.float16, 'bf16': np.uint16, 'i64': np.int64, 'i32': np.int32,
      'i16': np.int16, 'i8': np.int8, 'ui8': np.uint8, 'i1': np.uint8}
BITS = {'i64': (64, True), 'i32': (32, True), 'i16': (16, True), 'i8': (8, True), 'ui8': (8, False), 'i1': (1, False)}
FLOATS = ('f32', 'f16', 'bf16')

def bf16_to_f32(u): return (u.astype(np.uint32) << 16).view(np.float32)
def f32_to_bf16(f):
    f = np.asarray(f, np.float32); u = f.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), ((u >> 16) | 0x40).astype(np.uint16), r)
def to_f32(a, t): return bf16_to_f32(a) if t == 'bf16' else a.astype(np.float32)
def from_f32(f, t):
    f = np.asarray(f, np.float32)
    return f32_to_bf16(f) if t == 'bf16' else f.astype(NP[t])
def wrap(v, t):
    bits, signed = BITS[t]
    v &= (1 << bits) - 1
    if signed and v >= 1 << (bits - 1): v -= 1 << bits
    return v
def ints(a): return [int(v) for v in a]
def round_sig(v, p):  # integer rounded to p significant bits, ties to even
    m = abs(v); n = m.bit_length()
    if n <= p: return v
    s = n - p; q = m >> s; r = m & ((1 << s) - 1); h = 1 << (s - 1)
    if r > h or (r == h and q & 1): q += 1
    return (q << s) * (1 if v >= 0 else -1)

def fmax(a, b):
    r = np.where(a > b, a, b)
    r = np.where((a == b) & (a == 0), np.where(np.signbit(a), b, a), r)
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), r).astype(np.float32)
def fmin(a, b):
    r = np.where(a < b, a, b)
    r = np.where((a == b) & (a == 0), np.where(np.signbit(a), a, b), r)
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan), r).astype(np.float32)

def f64(fn): return lambda x: fn(x.astype(np.float64)).astype(np.float32)
FUN = {
  'negate': lambda x: -x, 'abs': np.abs,
  'sign': lambda x: np.where(np.isnan(x) | (x == 0), x, np.copysign(np.float32(1), x)).astype(np.float32),
  'floor': np.floor, 'ceil': np.ceil, 'round_nearest_even': np.rint,
  'round_nearest_afz': f64(lambda x: np.copysign(np.trunc(x + np.copysign(0.5, x)), x)),
  'sqrt': f64(np.sqrt), 'rsqrt': f64(lambda x: 1.0 / np.sqrt(x)), 'exponential': f64(np.exp),
  'exponential_minus_one': f64(np.expm1), 'log': f64(np.log), 'log_plus_one': f64(np.log1p),
  'tanh': f64(np.tanh), 'sine': f64(np.sin), 'cosine': f64(np.cos),
  'logistic': f64(lambda x: 1.0 / (1.0 + np.exp(-x))),
  'erf': f64(np.vectorize(lambda v: math.erf(v) if not math.isnan(v) else v, otypes=[np.float64])),
}
BFUN = {'add': lambda a, b: a + b, 'subtract': lambda a, b: a - b, 'multiply': lambda a, b: a * b,
        'divide': lambda a, b: a / b, 'remainder': np.fmod, 'maximum': fmax, 'minimum': fmin,
        'power': lambda a, b: np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)}

def idiv(a, b):
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q
def ipow(a, b, t):
    bits, signed = BITS[t]
    if b < 0: return 1 if a == 1 else ((-1 if b & 1 else 1) if a == -1 else 0)
    return pow(a, b, 1 << bits)
IFUN = {'add': lambda a, b, t: a + b, 'subtract': lambda a, b, t: a - b, 'multiply': lambda a, b, t: a * b,
        'divide': lambda a, b, t: -1 if b == 0 else idiv(a, b),
        'remainder': lambda a, b, t: a if b == 0 else a - b * idiv(a, b),
        'maximum': lambda a, b, t: max(a, b), 'minimum': lambda a, b, t: min(a, b), 'power': ipow,
        'and': lambda a, b, t: a & b, 'or': lambda a, b, t: a | b, 'xor': lambda a, b, t: a ^ b}
BOOL = {'add': 'or', 'multiply': 'and', 'maximum': 'or', 'minimum': 'and'}
IUN = {'negate': lambda a: -a, 'abs': abs, 'sign': lambda a: (a > 0) - (a < 0), 'not': lambda a: ~a}

def total_key(f):
    k = f.view(np.int32).astype(np.int64)
    return np.where(k < 0, k ^ 0x7fffffff, k)
CMP = {'EQ': np.equal, 'NE': np.not_equal, 'GE': np.greater_equal, 'GT': np.greater,
       'LE': np.less_equal, 'LT': np.less}

def convert(x, s, t):
    if s in FLOATS:
        f = to_f32(x, s)
        if t in FLOATS: return from_f32(f, t)
        if t == 'i1': return (f != 0).astype(np.uint8)
        bits, signed = BITS[t]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        out = []
        for v in f.astype(np.float64):
            if math.isnan(v): out.append(0)
            elif math.isinf(v): out.append(hi if v > 0 else lo)
            else: out.append(min(max(int(math.trunc(v)), lo), hi))
        return np.array(out, dtype=object).astype(NP[t])
    vs = ints(x)
    if t == 'i1': return np.array([v != 0 for v in vs], np.uint8)
    if t == 'f32': return np.array([float(round_sig(v, 24)) for v in vs], np.float64).astype(np.float32)
    if t == 'bf16': return f32_to_bf16(np.array([float(round_sig(v, 8)) for v in vs], np.float64).astype(np.float32))
    if t == 'f16': return np.array([float(round_sig(v, 11)) for v in vs], np.float64).astype(np.float16)
    return np.array([wrap(v, t) for v in vs], dtype=object).astype(NP[t])

for line in open(os.path.join(D, 'manifest.txt')):
    f = line.split()
    cid, op, tout, n = f[0], f[1], f[2], int(f[3])
    tins = f[4].split(',')
    extra = f[5:]
    xs = [np.fromfile(os.path.join(D, '%s_%d.bin' % (cid, i)), dtype=NP[t]) for i, t in enumerate(tins)]
    t = tins[0]
    if op == 'convert':
        y = convert(xs[0], t, tout)
    elif op == 'compare':
        d, ct = extra
        if t in FLOATS:
            a, b = to_f32(xs[0], t), to_f32(xs[1], t)
            if ct == 'TOTALORDER': a, b = total_key(a), total_key(b)
        else:
            a, b = xs[0], xs[1]
        y = CMP[d](a, b).astype(np.uint8)
    elif op == 'select':
        p = xs[0] if xs[0].size == n else np.repeat(xs[0], n)
        y = np.where(p != 0, xs[1], xs[2])
    elif op == 'clamp':
        lo = xs[0] if xs[0].size == n else np.repeat(xs[0], n)
        hi = xs[2] if xs[2].size == n else np.repeat(xs[2], n)
        if t in FLOATS:
            y = from_f32(fmin(fmax(to_f32(xs[1], t), to_f32(lo, t)), to_f32(hi, t)), t)
        else:
            y = np.minimum(np.maximum(xs[1], lo), hi)
    elif t in FLOATS:
        fs = [to_f32(x, t) for x in xs]
        y = from_f32(FUN[op](fs[0]) if len(fs) == 1 else BFUN[op](fs[0], fs[1]), t)
    elif t == 'i1':
        a = ints(xs[0])
        if len(xs) == 1: y = [1 - v for v in a]
        else:
            o = BOOL.get(op, op); b = ints(xs[1])
            y = [(u & v) if o == 'and' else (u | v) if o == 'or' else (u ^ v) for u, v in zip(a, b)]
        y = np.array(y, np.uint8)
    else:
        a = ints(xs[0])
        if len(xs) == 1: y = [wrap(IUN[op](v), t) for v in a]
        else: y = [wrap(IFUN[op](u, v, t), t) for u, v in zip(a, ints(xs[1]))]
        y = np.array(y, dtype=object).astype(NP[t])
    np.asarray(y).astype(NP[tout]).tofile(os.path.join(D, cid + '.out'))
)PY";

struct Case {
  std::string op;  // stablehlo name without prefix ("erf" is chlo)
  std::vector<Tensor> inputs;
  TensorType out;
  AttrDict attrs;
  std::string extra;              // oracle arguments
  int ulp = 0;                    // allowed distance in units of the output type
  std::vector<uint8_t> expected;  // filled by the oracle
};

const std::vector<std::string> kTranscendental = {
    "exponential", "exponential_minus_one", "log", "log_plus_one", "tanh", "sine", "cosine", "logistic", "erf", "rsqrt",
    "power"};
const std::vector<std::string> kUnary = {"negate",
                                         "abs",
                                         "sign",
                                         "not",
                                         "exponential",
                                         "exponential_minus_one",
                                         "log",
                                         "log_plus_one",
                                         "sqrt",
                                         "rsqrt",
                                         "tanh",
                                         "logistic",
                                         "sine",
                                         "cosine",
                                         "floor",
                                         "ceil",
                                         "round_nearest_afz",
                                         "round_nearest_even",
                                         "erf"};
const std::vector<std::string> kBinary = {"add",     "subtract", "multiply", "divide", "remainder", "maximum",
                                          "minimum", "power",    "and",      "or",     "xor"};

std::string full_name(const std::string& op) { return op == "erf" ? "chlo.erf" : "stablehlo." + op; }

// Which (op, type) pairs the spec allows; everything else must be rejected as kUnsupported.
bool spec_allows(const std::string& op, DType t) {
  bool f = is_float(t), b = t == DType::kI1;
  if (op == "negate") return !b;
  if (op == "abs" || op == "sign") return !b && t != DType::kU8;
  if (op == "not" || op == "and" || op == "or" || op == "xor") return !f;
  if (op == "add" || op == "multiply" || op == "maximum" || op == "minimum") return true;
  if (op == "subtract" || op == "divide" || op == "remainder" || op == "power") return !b;
  return f;
}

std::vector<Case> build_cases() {
  std::mt19937 rng(1234);
  std::vector<Case> cases;
  for (DType t : kAllDTypes) {
    size_t es = dtype_size(t);
    for (const auto& op : kUnary) {
      if (!spec_allows(op, t)) continue;
      auto v = sample_values(t, rng, 300);
      int64_t n = int64_t(v.size() / es);
      Case c{op, {from_bytes(t, {n}, v)}, {t, {n}}, {}, "", 0, {}};
      if (std::find(kTranscendental.begin(), kTranscendental.end(), op) != kTranscendental.end())
        c.ulp = t == DType::kF32 ? 4 : 1;
      cases.push_back(std::move(c));
    }
    for (const auto& op : kBinary) {
      if (!spec_allows(op, t)) continue;
      auto v = sample_values(t, rng, 400);
      std::vector<uint8_t> x, y;
      cross(v, es, x, y, 60);
      for (size_t i = 60 * es; i + es <= v.size(); i += es) {  // plus random pairs
        size_t j = (rng() % (v.size() / es)) * es;
        x.insert(x.end(), v.begin() + long(i), v.begin() + long(i + es));
        y.insert(y.end(), v.begin() + long(j), v.begin() + long(j + es));
      }
      int64_t n = int64_t(x.size() / es);
      Case c{op, {from_bytes(t, {n}, x), from_bytes(t, {n}, y)}, {t, {n}}, {}, "", 0, {}};
      if (op == "power") c.ulp = t == DType::kF32 ? 4 : 1;
      cases.push_back(std::move(c));
    }
    // compare: every direction with every comparison_type that fits the type
    std::vector<std::string> ctypes;
    if (is_float(t))
      ctypes = {"FLOAT", "TOTALORDER"};
    else if (is_unsigned(t) || t == DType::kI1)
      ctypes = {"UNSIGNED"};
    else
      ctypes = {"SIGNED"};
    auto v = sample_values(t, rng, 40);
    std::vector<uint8_t> x, y;
    cross(v, es, x, y, 100);
    int64_t n = int64_t(x.size() / es);
    for (const char* d : {"EQ", "NE", "GE", "GT", "LE", "LT"})
      for (const auto& ct : ctypes) {
        AttrDict a{{"comparison_direction", Attr::enumeration("comparison_direction", d)},
                   {"comparison_type", Attr::enumeration("comparison_type", ct)}};
        std::string extra = std::string(d) + " " + ct;
        cases.push_back({"compare",
                         {from_bytes(t, {n}, x), from_bytes(t, {n}, y)},
                         {DType::kI1, {n}},
                         std::move(a),
                         std::move(extra),
                         0,
                         {}});
      }
    // select: scalar and full predicates; clamp: scalar and full bounds
    {
      std::vector<uint8_t> p;
      for (int64_t i = 0; i < n; ++i) p.push_back(uint8_t(rng() & 1));
      Tensor a = from_bytes(t, {n}, x), b = from_bytes(t, {n}, y);
      cases.push_back({"select", {from_bytes(DType::kI1, {n}, p), a, b}, {t, {n}}, {}, "", 0, {}});
      cases.push_back({"select", {from_bytes(DType::kI1, {}, {1}), a, b}, {t, {n}}, {}, "", 0, {}});
      cases.push_back({"select", {from_bytes(DType::kI1, {}, {0}), a, b}, {t, {n}}, {}, "", 0, {}});
      auto lo = sample_values(t, rng, 40), hi = sample_values(t, rng, 40);
      std::vector<uint8_t> los, his;
      for (int64_t i = 0; i < n; ++i) {
        size_t k = (size_t(i) % (lo.size() / es)) * es, m = (size_t(i * 7) % (hi.size() / es)) * es;
        los.insert(los.end(), lo.begin() + long(k), lo.begin() + long(k + es));
        his.insert(his.end(), hi.begin() + long(m), hi.begin() + long(m + es));
      }
      cases.push_back({"clamp", {from_bytes(t, {n}, los), a, from_bytes(t, {n}, his)}, {t, {n}}, {}, "", 0, {}});
      std::vector<uint8_t> l1(lo.begin() + 2 * long(es), lo.begin() + 3 * long(es));  // -1 or 1-ish
      std::vector<uint8_t> h1(v.begin() + 11 * long(es), v.begin() + 12 * long(es));
      cases.push_back({"clamp", {from_bytes(t, {}, l1), a, from_bytes(t, {}, h1)}, {t, {n}}, {}, "", 0, {}});
      cases.push_back({"clamp", {from_bytes(t, {}, l1), a, from_bytes(t, {n}, his)}, {t, {n}}, {}, "", 0, {}});
    }
    // convert to every type
    auto cv = sample_values(t, rng, 500);
    int64_t cn = int64_t(cv.size() / es);
    for (DType u : kAllDTypes) cases.push_back({"convert", {from_bytes(t, {cn}, cv)}, {u, {cn}}, {}, "", 0, {}});
  }
  return cases;
}

std::vector<Case>& oracle_cases() {
  static std::vector<Case> cases = [] {
    std::vector<Case> cs = build_cases();
    fs::path dir = fs::temp_directory_path() / ("hlx_ew_oracle_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream man(dir / "manifest.txt");
    for (size_t i = 0; i < cs.size(); ++i) {
      const Case& c = cs[i];
      man << "c" << i << " " << c.op << " " << dtype_name(c.out.dtype) << " " << num_elements(c.out.shape) << " ";
      for (size_t k = 0; k < c.inputs.size(); ++k) {
        man << (k ? "," : "") << dtype_name(c.inputs[k].dtype());
        std::ofstream f(dir / std::string("c").append(std::to_string(i) + "_" + std::to_string(k) + ".bin"),
                        std::ios::binary);
        f.write(static_cast<const char*>(c.inputs[k].raw()), std::streamsize(c.inputs[k].nbytes()));
      }
      man << " " << c.extra << "\n";
    }
    man.close();
    { std::ofstream(dir / "oracle.py") << kOracle; }
    std::string cmd = "/usr/bin/python3 " + (dir / "oracle.py").string() + " " + dir.string();
    if (std::system(cmd.c_str()) != 0) {
      ADD_FAILURE() << "numpy oracle failed: " << cmd;
      cs.clear();
      return cs;
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      std::ifstream f(dir / std::string("c").append(std::to_string(i) + ".out"), std::ios::binary);
      cs[i].expected.assign(std::istreambuf_iterator<char>(f), {});
    }
    fs::remove_all(dir);
    return cs;
  }();
  return cases;
}

// Distance in units in the last place between two float encodings (ordered as integers); NaNs match NaNs.
int64_t ulp_distance(DType t, const uint8_t* a, const uint8_t* b) {
  auto key = [&](const uint8_t* p, bool& nan) -> int64_t {
    if (t == DType::kF32) {
      uint32_t u;
      std::memcpy(&u, p, 4);
      nan = (u & 0x7fffffffu) > 0x7f800000u;
      return (u >> 31) ? -int64_t(u & 0x7fffffffu) : int64_t(u);
    }
    uint16_t u;
    std::memcpy(&u, p, 2);
    nan = t == DType::kBF16 ? (u & 0x7fff) > 0x7f80 : (u & 0x7fff) > 0x7c00;
    return (u >> 15) ? -int64_t(u & 0x7fff) : int64_t(u);
  };
  bool na, nb;
  int64_t ka = key(a, na), kb = key(b, nb);
  if (na || nb) return na == nb ? 0 : INT64_MAX;
  return std::llabs(ka - kb);
}

std::string show(DType t, const uint8_t* p) {
  std::ostringstream os;
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      os << f << " (0x" << std::hex << f32_bits(f) << ")";
      break;
    }
    case DType::kBF16: {
      bf16 h;
      std::memcpy(&h, p, 2);
      os << bf16_to_f32(h) << " (0x" << std::hex << h.bits << ")";
      break;
    }
    case DType::kF16: {
      f16 h;
      std::memcpy(&h, p, 2);
      os << f16_to_f32(h) << " (0x" << std::hex << h.bits << ")";
      break;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      os << v;
      break;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      os << v;
      break;
    }
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      os << v;
      break;
    }
    case DType::kI8:
      os << int(int8_t(*p));
      break;
    default:
      os << int(*p);
      break;
  }
  return os.str();
}

// Runs every oracle case whose op is in `ops` and compares; returns the number of cases checked.
// The oracle is IEEE arithmetic with subnormals. The runtime may set FTZ/DAZ on its threads (and
// other tests may leave them set on this one), so the checks run with both cleared.
struct IeeeSubnormals {
  unsigned saved = _mm_getcsr();
  IeeeSubnormals() { _mm_setcsr(saved & ~0x8040u); }  // FTZ (bit 15) and DAZ (bit 6)
  ~IeeeSubnormals() { _mm_setcsr(saved); }
};

int check_cases(const std::vector<std::string>& ops) {
  IeeeSubnormals ieee;
  int checked = 0;
  for (Case& c : oracle_cases()) {
    if (std::find(ops.begin(), ops.end(), c.op) == ops.end()) continue;
    std::string what = full_name(c.op) + " " + c.extra + " " + std::string(dtype_name(c.inputs[0].dtype())) + "->" +
                       std::string(dtype_name(c.out.dtype));
    auto y = run_op(full_name(c.op), c.inputs, c.out, c.attrs);
    if (!y.ok()) {
      ADD_FAILURE() << what << ": " << y.status().to_string();
      continue;
    }
    ++checked;
    size_t es = dtype_size(c.out.dtype);
    if (c.expected.size() != y->nbytes()) {
      ADD_FAILURE() << what << ": oracle gave " << c.expected.size() << " bytes, kernel " << y->nbytes();
      continue;
    }
    const auto* got = static_cast<const uint8_t*>(y->raw());
    int bad = 0;
    for (int64_t i = 0; i < y->num_elements() && bad < 5; ++i) {
      const uint8_t *g = got + i * long(es), *e = c.expected.data() + i * long(es);
      bool ok = is_float(c.out.dtype) ? ulp_distance(c.out.dtype, g, e) <= c.ulp : std::memcmp(g, e, es) == 0;
      if (!ok) {
        ++bad;
        std::string ins;
        for (const auto& t : c.inputs)
          ins += show(t.dtype(), static_cast<const uint8_t*>(t.raw()) +
                                     (t.num_elements() == 1 ? 0 : i) * long(dtype_size(t.dtype()))) +
                 " ";
        ADD_FAILURE() << what << " element " << i << " inputs " << ins << ": got " << show(c.out.dtype, g) << ", numpy "
                      << show(c.out.dtype, e);
      }
    }
  }
  return checked;
}

// ---------------------------------------------------------------- oracle tests

TEST(ElementwiseNumpy, UnaryOpsAllTypes) { EXPECT_EQ(check_cases(kUnary), 3 * 18 + 19); }
TEST(ElementwiseNumpy, BinaryOpsAllTypes) { EXPECT_EQ(check_cases(kBinary), 3 * 8 + 5 * 11 + 7); }
TEST(ElementwiseNumpy, CompareAllDirectionsAndTypes) { EXPECT_EQ(check_cases({"compare"}), 6 * (3 * 2 + 6)); }
TEST(ElementwiseNumpy, SelectAndClamp) { EXPECT_EQ(check_cases({"select", "clamp"}), 9 * 6); }
TEST(ElementwiseNumpy, ConvertEveryPair) { EXPECT_EQ(check_cases({"convert"}), 81); }

// ---------------------------------------------------------------- spec coverage and errors

TEST(Elementwise, UnsupportedTypeIsRejectedAtCompileTime) {
  int rejected = 0;
  for (DType t : kAllDTypes)
    for (const auto& op : kUnary) {
      if (spec_allows(op, t)) continue;
      auto c = compile_op(full_name(op), {{t, {3}}}, {t, {3}});
      ASSERT_FALSE(c->kernel.ok()) << op << " " << dtype_name(t);
      EXPECT_EQ(c->kernel.status().kind(), ErrorKind::kUnsupported) << c->kernel.status().to_string();
      EXPECT_NE(c->kernel.status().message().find(std::string(dtype_name(t))), std::string::npos)
          << c->kernel.status().message();
      ++rejected;
    }
  for (DType t : kAllDTypes)
    for (const auto& op : kBinary) {
      if (spec_allows(op, t)) continue;
      auto c = compile_op(full_name(op), {{t, {3}}, {t, {3}}}, {t, {3}});
      ASSERT_FALSE(c->kernel.ok()) << op << " " << dtype_name(t);
      EXPECT_EQ(c->kernel.status().kind(), ErrorKind::kUnsupported);
      ++rejected;
    }
  EXPECT_GT(rejected, 60);
}

TEST(Elementwise, BadOperandsAndAttributesAreErrors) {
  auto mismatch = compile_op("stablehlo.add", {{DType::kF32, {3}}, {DType::kF32, {4}}}, {DType::kF32, {3}});
  EXPECT_EQ(mismatch->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto arity = compile_op("stablehlo.add", {{DType::kF32, {3}}}, {DType::kF32, {3}});
  EXPECT_EQ(arity->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto no_dir = compile_op("stablehlo.compare", {{DType::kF32, {3}}, {DType::kF32, {3}}}, {DType::kI1, {3}});
  EXPECT_EQ(no_dir->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto bad_dir = compile_op("stablehlo.compare", {{DType::kF32, {3}}, {DType::kF32, {3}}}, {DType::kI1, {3}},
                            {{"comparison_direction", Attr::enumeration("comparison_direction", "XX")}});
  EXPECT_EQ(bad_dir->kernel.status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(bad_dir->kernel.status().message().find("XX"), std::string::npos);
  auto bad_type = compile_op("stablehlo.compare", {{DType::kI32, {3}}, {DType::kI32, {3}}}, {DType::kI1, {3}},
                             {{"comparison_direction", Attr::enumeration("comparison_direction", "LT")},
                              {"comparison_type", Attr::enumeration("comparison_type", "FLOAT")}});
  EXPECT_EQ(bad_type->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto bad_pred =
      compile_op("stablehlo.select", {{DType::kI1, {2}}, {DType::kF32, {3}}, {DType::kF32, {3}}}, {DType::kF32, {3}});
  EXPECT_EQ(bad_pred->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto bad_clamp =
      compile_op("stablehlo.clamp", {{DType::kF32, {2}}, {DType::kF32, {3}}, {DType::kF32, {}}}, {DType::kF32, {3}});
  EXPECT_EQ(bad_clamp->kernel.status().kind(), ErrorKind::kInvalidArgument);
  auto bad_convert = compile_op("stablehlo.convert", {{DType::kF32, {3}}}, {DType::kI8, {4}});
  EXPECT_EQ(bad_convert->kernel.status().kind(), ErrorKind::kInvalidArgument);
}

TEST(Elementwise, RunRejectsBuffersOfOtherTypes) {
  auto c = compile_op("stablehlo.add", {{DType::kF32, {3}}, {DType::kF32, {3}}}, {DType::kF32, {3}});
  ASSERT_TRUE(c->kernel.ok());
  Tensor a = Tensor::zeros(DType::kF32, {3}), b = Tensor::zeros(DType::kF32, {4}), y = Tensor::zeros(DType::kF32, {3});
  Status s = (*c->kernel)->run({&a, &b}, {&y});
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(s.message().find("f32[4]"), std::string::npos) << s.message();
  EXPECT_EQ((*c->kernel)->run({&a}, {&y}).kind(), ErrorKind::kInvalidArgument);
}

// ---------------------------------------------------------------- edge shapes, in-place, threads

TEST(Elementwise, EdgeShapes) {
  // Rank 0.
  Tensor a = Tensor::empty(DType::kI32, {}), b = Tensor::empty(DType::kI32, {});
  *a.data<int32_t>() = 7;
  *b.data<int32_t>() = -2;
  auto y = run_op("stablehlo.divide", {a, b}, {DType::kI32, {}});
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(*y->data<int32_t>(), -3);
  // Zero-size dims compile and run without touching memory.
  Tensor z = Tensor::empty(DType::kBF16, {0, 3});
  auto yz = run_op("stablehlo.exponential", {z}, {DType::kBF16, {0, 3}});
  ASSERT_TRUE(yz.ok()) << yz.status().to_string();
  auto cz = run_op("stablehlo.convert", {z}, {DType::kI8, {0, 3}});
  ASSERT_TRUE(cz.ok());
  // Size-1 dims.
  Tensor s = Tensor::empty(DType::kF16, {1, 1, 5});
  for (int i = 0; i < 5; ++i) s.data<f16>()[i] = f32_to_f16(float(i) - 2.0f);
  auto ys = run_op("stablehlo.abs", {s}, {DType::kF16, {1, 1, 5}});
  ASSERT_TRUE(ys.ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(f16_to_f32(ys->data<f16>()[i]), std::fabs(float(i) - 2.0f));
}

TEST(Elementwise, InPlaceOutputAliasingAnInput) {
  const int64_t n = 100000;  // above the parallel threshold
  Tensor a = Tensor::empty(DType::kBF16, {n}), b = Tensor::empty(DType::kBF16, {n});
  std::vector<float> ref(n);
  for (int64_t i = 0; i < n; ++i) {
    a.data<bf16>()[i] = f32_to_bf16(float(i % 1000) * 0.37f);
    b.data<bf16>()[i] = f32_to_bf16(1.0f - float(i % 77));
    ref[size_t(i)] = bf16_to_f32(f32_to_bf16(bf16_to_f32(a.data<bf16>()[i]) * bf16_to_f32(b.data<bf16>()[i])));
  }
  auto c = compile_op("stablehlo.multiply", {{DType::kBF16, {n}}, {DType::kBF16, {n}}}, {DType::kBF16, {n}});
  ASSERT_TRUE(c->kernel.ok());
  EXPECT_TRUE((*c->kernel)->can_run_in_place(0));
  EXPECT_TRUE((*c->kernel)->can_run_in_place(1));
  EXPECT_FALSE((*c->kernel)->can_run_in_place(2));
  Tensor out = Tensor::borrow(DType::kBF16, {n}, b.raw(), b.storage());
  ASSERT_TRUE((*c->kernel)->run({&a, &b}, {&out}).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bf16_to_f32(b.data<bf16>()[i]), ref[size_t(i)]) << i;

  // A convert to another width must not claim in-place.
  auto cv = compile_op("stablehlo.convert", {{DType::kF32, {4}}}, {DType::kBF16, {4}});
  ASSERT_TRUE(cv->kernel.ok());
  EXPECT_FALSE((*cv->kernel)->can_run_in_place(0));
  // Compare writes i1: in place only over i1 operands.
  AttrDict eq{{"comparison_direction", Attr::enumeration("comparison_direction", "EQ")}};
  auto cf = compile_op("stablehlo.compare", {{DType::kF32, {4}}, {DType::kF32, {4}}}, {DType::kI1, {4}}, eq);
  ASSERT_TRUE(cf->kernel.ok());
  EXPECT_FALSE((*cf->kernel)->can_run_in_place(0));
}

TEST(Elementwise, LargeTensorMatchesSerialLoop) {
  // Parallel chunks must cover every element exactly once.
  const int64_t n = 300007;
  Tensor a = Tensor::empty(DType::kI16, {n}), b = Tensor::empty(DType::kI16, {n});
  for (int64_t i = 0; i < n; ++i) {
    a.data<int16_t>()[i] = int16_t(i * 31);
    b.data<int16_t>()[i] = int16_t((i % 13) - 6);
  }
  auto y = run_op("stablehlo.remainder", {a, b}, {DType::kI16, {n}});
  ASSERT_TRUE(y.ok());
  for (int64_t i = 0; i < n; ++i) {
    int x = a.data<int16_t>()[i], d = b.data<int16_t>()[i];
    int want = d == 0 ? x : x % d;
    ASSERT_EQ(y->data<int16_t>()[i], want) << i;
  }
}

// The vectorised exp/logistic (kernels/vexp.h) over every 61st f32 bit pattern (70M values, every
// exponent incl. subnormals, ±inf and NaN payloads) against double precision: at most 1 ulp for
// exp (normal results; subnormal results get one more rounding) and 2 ulp for logistic, exact
// inf / 0 / NaN where std::exp gives them. Also through the op kernel at array offsets that are
// not multiples of 16 (masked tails).
TEST(Elementwise, VectorExpAndLogisticUlpOverAllFloats) {
  auto ulps = [](float got, double want) -> int64_t {
    const float w = float(want);  // correctly rounded f32 of the double result
    if (std::isnan(w) || std::isnan(got)) return std::isnan(w) == std::isnan(got) ? 0 : INT64_MAX;
    auto key = [](float f) {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return (u >> 31) ? -int64_t(u & 0x7fffffffu) : int64_t(u);
    };
    return std::llabs(key(got) - key(w));
  };
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> x(kChunk), e(kChunk), l(kChunk);
  int64_t worst_exp = 0, worst_log = 0, n = 0;
  float at_exp = 0, at_log = 0;
  uint64_t bits = 0;
  while (bits <= 0xffffffffull) {
    int64_t m = 0;
    for (; m < kChunk && bits <= 0xffffffffull; ++m, bits += 61) {
      uint32_t u = uint32_t(bits);
      std::memcpy(&x[size_t(m)], &u, 4);
    }
    kernels::exp_f32(x.data(), e.data(), m);
    kernels::logistic_f32(x.data(), l.data(), m);
    for (int64_t i = 0; i < m; ++i) {
      const double xd = x[size_t(i)];
      const int64_t de = ulps(e[size_t(i)], std::exp(xd));
      const int64_t dl = ulps(l[size_t(i)], 1.0 / (1.0 + std::exp(-xd)));
      if (de > worst_exp) worst_exp = de, at_exp = x[size_t(i)];
      if (dl > worst_log) worst_log = dl, at_log = x[size_t(i)];
    }
    n += m;
  }
  EXPECT_GT(n, 70000000);
  EXPECT_LE(worst_exp, 1) << "exp worst at x=" << at_exp;
  EXPECT_LE(worst_log, 2) << "logistic worst at x=" << at_log;
  std::printf("vector exp max %lld ulp (x=%g), logistic max %lld ulp (x=%g) over %lld values\n", (long long)worst_exp,
              at_exp, (long long)worst_log, at_log, (long long)n);

  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edge[] = {inf,       -inf,   nan,        -nan,   0.f,         -0.f,        88.72283f,
                        88.72284f, 89.f,   -87.33655f, -87.5f, -103.27893f, -103.97208f, -104.f,
                        -200.f,    1e-30f, -1e-30f,    1e-45f, 3.4e38f,     -3.4e38f};
  for (float v : edge) {
    float y, z;
    kernels::exp_f32(&v, &y, 1);
    kernels::logistic_f32(&v, &z, 1);
    EXPECT_LE(ulps(y, std::exp(double(v))), 1) << "exp(" << v << ") = " << y;
    EXPECT_LE(ulps(z, 1.0 / (1.0 + std::exp(-double(v)))), 2) << "logistic(" << v << ") = " << z;
    if (std::isinf(std::exp(v)) || std::exp(v) == 0.f) {
      EXPECT_EQ(y, std::exp(v)) << v;
    }
  }

  // Op kernel on an odd-length f32 and bf16 tensor: every element equals the array kernel's.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-120.f, 120.f);
  for (const char* op : {"stablehlo.exponential", "stablehlo.logistic"}) {
    Tensor t = Tensor::empty(DType::kF32, {1000});
    for (int64_t i = 0; i < 1000; ++i) t.data<float>()[i] = u(rng);
    auto y = run_op(op, {t}, {DType::kF32, {1000}});
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    for (int64_t i = 0; i < 1000; i += 37) {
      float want;
      if (std::string(op) == "stablehlo.exponential")
        kernels::exp_f32(t.data<float>() + i, &want, 1);
      else
        kernels::logistic_f32(t.data<float>() + i, &want, 1);
      ASSERT_EQ(std::memcmp(&want, y->data<float>() + i, 4), 0) << op << " element " << i;
    }
  }
}

// The vectorised tanh (kernels/vexp.h) over every 61st f32 bit pattern against double precision:
// at most 1 ulp, and correctly rounded (0 ulp from f32(tanh(double))) on all but a handful of them
// (bf16 models round the GELU output for the next matmul: every non-correctly-rounded result is a
// chance to round it the other way than a correctly rounded libm); NaN -> NaN, ±0 and ±inf exact;
// through the one-op kernel at unaligned offsets (masked tails).
TEST(Elementwise, VectorTanhUlpOverAllFloats) {
  auto key = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return (u >> 31) ? -int64_t(u & 0x7fffffffu) : int64_t(u);
  };
  auto ulps = [&](float got, double want) -> int64_t {
    const float w = float(want);
    if (std::isnan(w) || std::isnan(got)) return std::isnan(w) == std::isnan(got) ? 0 : INT64_MAX;
    return std::llabs(key(got) - key(w));
  };
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> x(kChunk), t(kChunk);
  int64_t worst = 0, n = 0, not_cr = 0;
  float at = 0;
  uint64_t bits = 0;
  while (bits <= 0xffffffffull) {
    int64_t m = 0;
    for (; m < kChunk && bits <= 0xffffffffull; ++m, bits += 61) {
      uint32_t u = uint32_t(bits);
      std::memcpy(&x[size_t(m)], &u, 4);
    }
    kernels::tanh_f32(x.data(), t.data(), m);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t d = ulps(t[size_t(i)], std::tanh(double(x[size_t(i)])));
      if (d > worst) worst = d, at = x[size_t(i)];
      not_cr += d != 0;
    }
    n += m;
  }
  EXPECT_GT(n, 70000000);
  EXPECT_LE(worst, 1) << "tanh worst at x=" << at;
  EXPECT_LE(not_cr, 10) << "results that are not correctly rounded";
  std::printf("vector tanh max %lld ulp (x=%g), %lld not correctly rounded, over %lld values\n", (long long)worst, at,
              (long long)not_cr, (long long)n);

  // Dense over the range where tanh is neither x nor ±1 in f32.
  for (float v = 0.5f; v < 10.5f; v = std::nextafter(v, 11.f) + 1e-5f * v) {
    for (float s : {v, -v}) {
      float y;
      kernels::tanh_f32(&s, &y, 1);
      ASSERT_LE(ulps(y, std::tanh(double(s))), 1) << "tanh(" << s << ") = " << y;
    }
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float edge[] = {inf,  -inf, nan,   -nan,     0.f,    -0.f,    0.625f, -0.625f, 0.62499994f, 9.f,
                        10.f, 20.f, 1e30f, -3.4e38f, 1e-30f, -1e-30f, 1e-45f, -1e-45f, 1e-3f};
  for (float v : edge) {
    float y;
    kernels::tanh_f32(&v, &y, 1);
    EXPECT_LE(ulps(y, std::tanh(double(v))), 1) << "tanh(" << v << ") = " << y;
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(y));
    }
    if (std::isinf(v) || v == 0.f) {
      EXPECT_EQ(key(y), key(std::tanh(v))) << v;
    }  // ±1, and ±0 keeps its sign
  }

  // Op kernel on an odd-length f32 tensor: every element equals the array kernel's.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-12.f, 12.f);
  Tensor in = Tensor::empty(DType::kF32, {1001});
  for (int64_t i = 0; i < 1001; ++i) in.data<float>()[i] = u(rng);
  auto y = run_op("stablehlo.tanh", {in}, {DType::kF32, {1001}});
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  for (int64_t i = 0; i < 1001; i += 13) {
    float want;
    kernels::tanh_f32(in.data<float>() + i, &want, 1);
    ASSERT_EQ(std::memcmp(&want, y->data<float>() + i, 4), 0) << "element " << i;
  }
}

// Facts the conformance corpus (XLA CPU) relies on, spelled out.
TEST(Elementwise, XlaIntegerAndConversionSemantics) {
  auto i32 = [](std::vector<int32_t> v) {
    Tensor t = Tensor::empty(DType::kI32, {int64_t(v.size())});
    std::memcpy(t.raw(), v.data(), v.size() * 4);
    return t;
  };
  auto d = run_op("stablehlo.divide", {i32({7, INT32_MIN, 5, -7}), i32({0, -1, -2, 2})}, {DType::kI32, {4}});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(std::vector<int32_t>(d->data<int32_t>(), d->data<int32_t>() + 4),
            (std::vector<int32_t>{-1, INT32_MIN, -2, -3}));
  auto r = run_op("stablehlo.remainder", {i32({7, INT32_MIN, 5, -7}), i32({0, -1, -2, 2})}, {DType::kI32, {4}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::vector<int32_t>(r->data<int32_t>(), r->data<int32_t>() + 4), (std::vector<int32_t>{7, 0, 1, -1}));
  auto p = run_op("stablehlo.power", {i32({2, 1, -1, -1, 3}), i32({-1, -5, -3, -4, 3})}, {DType::kI32, {5}});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(std::vector<int32_t>(p->data<int32_t>(), p->data<int32_t>() + 5), (std::vector<int32_t>{0, 1, -1, 1, 27}));
  Tensor f = Tensor::empty(DType::kF32, {5});
  float fv[5] = {NAN, -1e20f, 1e20f, -2.9f, 2.9f};
  std::memcpy(f.raw(), fv, sizeof fv);
  auto c = run_op("stablehlo.convert", {f}, {DType::kI8, {5}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::vector<int8_t>(c->data<int8_t>(), c->data<int8_t>() + 5), (std::vector<int8_t>{0, -128, 127, -2, 2}));
  auto u = run_op("stablehlo.convert", {f}, {DType::kU8, {5}});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(std::vector<uint8_t>(u->data<uint8_t>(), u->data<uint8_t>() + 5), (std::vector<uint8_t>{0, 0, 255, 0, 2}));
}

}  // namespace
}  // namespace hlx::rt
