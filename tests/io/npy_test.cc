#include "io/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "io_test_util.h"

namespace hlx {
namespace {

using testing::TempDir;

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s == "-") return out;  // the manifest's spelling of "nothing"
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) out.push_back(item);
  return out;
}

// Element i of `t` as a double (floats decoded, bf16/f16 through the exact conversions).
double value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return t.data<float>()[i];
    case DType::kF16:
      return f16_to_f32(f16{t.data<uint16_t>()[i]});
    case DType::kBF16:
      return bf16_to_f32(bf16{t.data<uint16_t>()[i]});
    case DType::kI64:
      return double(t.data<int64_t>()[i]);
    case DType::kI32:
      return t.data<int32_t>()[i];
    case DType::kI16:
      return t.data<int16_t>()[i];
    case DType::kI8:
      return t.data<int8_t>()[i];
    case DType::kU8:
    case DType::kI1:
      return t.data<uint8_t>()[i];
  }
  return 0;
}

// numpy writes arrays of every supported dtype and a text manifest of their values; we read both.
TEST(Npy, ReadsWhatNumpyWrites) {
  TempDir dir;
  std::string script = dir.file("gen.py");
  std::ofstream(script) << R"PY(
import sys
import numpy as np
out = sys.argv[1]
rng = np.random.default_rng(1234)
manifest = open(out + '/manifest.txt', 'w')

def save(name, a, version=None, values=None):
    path = '%s/%s.npy' % (out, name)
    if version is None:
        np.save(path, a)
    else:
        with open(path, 'wb') as f:
            np.lib.format.write_array(f, a, version=version)
    flat = a.ravel() if values is None else values.ravel()
    vals = [repr(float(v)) if flat.dtype.kind == 'f' else str(int(v)) for v in flat]
    shape = ','.join(str(d) for d in a.shape) or '-'
    manifest.write('%s %s %s %s\n' % (name, a.dtype.str, shape, ','.join(vals) or '-'))

shapes = [(), (0,), (5,), (2, 3, 4), (0, 3), (3, 1, 2)]
for descr in ['<f4', '<f2', '<i8', '<i4', '<i2', '|i1', '|u1', '|b1', '<u2']:
    dt = np.dtype(descr)
    for k, shape in enumerate(shapes):
        if dt.kind == 'f':
            a = (rng.standard_normal(shape) * 100).astype(dt)
        elif dt.kind == 'b':
            a = rng.integers(0, 2, shape).astype(dt)
        else:
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)
        name = '%s_%d' % (descr[1:], k)
        if descr == '<u2':
            # bf16 bits; the manifest holds the float32 values numpy derives from them.
            save(name, a, values=(a.astype(np.uint32).ravel() << 16).view(np.float32))
        else:
            save(name, a)
save('special_f4', np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38], np.float32))
save('special_f2', np.array([0.0, -0.0, np.inf, np.nan, 6e-8, 65504.0], np.float16))
save('v2_f4', (rng.standard_normal((4, 2)) * 10).astype(np.float32), version=(2, 0))
save('v3_i4', rng.integers(-1000, 1000, (3, 3), dtype=np.int32), version=(3, 0))
np.save(out + '/fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save(out + '/big_endian.npy', np.arange(3, dtype='>f4'))
np.save(out + '/f64.npy', np.arange(3, dtype=np.float64))
np.save(out + '/u2_plain.npy', np.arange(3, dtype=np.uint16))
)PY";
  ASSERT_EQ(testing::run_python(script, dir.path()), 0);

  std::ifstream manifest(dir.file("manifest.txt"));
  std::string line;
  int checked = 0;
  while (std::getline(manifest, line)) {
    std::istringstream ls(line);
    std::string name, descr, shape_s, values_s;
    ls >> name >> descr >> shape_s >> values_s;
    SCOPED_TRACE(name);
    std::optional<DType> as;
    if (descr == "<u2") as = DType::kBF16;
    auto t = read_npy(dir.file(name + ".npy"), as);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    Shape shape;
    for (const auto& d : split(shape_s, ',')) shape.push_back(std::stoll(d));
    EXPECT_EQ(t->shape(), shape);
    std::vector<std::string> values = split(values_s, ',');
    ASSERT_EQ(int64_t(values.size()), t->num_elements());
    for (size_t i = 0; i < values.size(); ++i) {
      if (is_float(t->dtype())) {
        double want = std::strtod(values[i].c_str(), nullptr);
        double got = value_at(*t, int64_t(i));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << i;
        } else {
          EXPECT_EQ(got, want) << i;
          EXPECT_EQ(std::signbit(got), std::signbit(want)) << i;
        }
      } else {
        // int64 extremes do not fit a double exactly: compare as integers.
        int64_t want = std::stoll(values[i]);
        int64_t got = t->dtype() == DType::kI64 ? t->data<int64_t>()[i] : int64_t(value_at(*t, int64_t(i)));
        EXPECT_EQ(got, want) << i;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 9 * 6 + 4);

  EXPECT_EQ(read_npy(dir.file("fortran.npy")).status().kind(), ErrorKind::kUnsupported);
  auto be = read_npy(dir.file("big_endian.npy"));
  EXPECT_EQ(be.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(be.status().message().find(">f4"), std::string::npos) << be.status().message();
  EXPECT_EQ(read_npy(dir.file("f64.npy")).status().kind(), ErrorKind::kUnsupported);
  EXPECT_EQ(read_npy(dir.file("u2_plain.npy")).status().kind(), ErrorKind::kUnsupported);
  auto as_i16 = read_npy(dir.file("u2_plain.npy"), DType::kI16);
  ASSERT_TRUE(as_i16.ok());
  EXPECT_EQ(as_i16->data<int16_t>()[2], 2);
  EXPECT_EQ(read_npy(dir.file("u2_plain.npy"), DType::kF32).status().kind(), ErrorKind::kInvalidArgument);
  // The u16 request does not change files of other dtypes.
  EXPECT_EQ(read_npy(dir.file("v2_f4.npy"), DType::kBF16)->dtype(), DType::kF32);
}

// We write every dtype and shape; numpy loads them and checks dtype, shape and values against a
// manifest printed from the source tensors.
TEST(Npy, NumpyReadsWhatWeWrite) {
  TempDir dir;
  std::ofstream manifest(dir.file("manifest.txt"));
  manifest.precision(17);
  const Shape shapes[] = {{}, {0}, {7}, {2, 3, 4}, {4, 0}, {1, 1, 1, 3}};
  uint32_t seed = 5;
  for (DType dt : kAllDTypes) {
    for (size_t k = 0; k < std::size(shapes); ++k) {
      Tensor t = testing::pattern_tensor(dt, shapes[k], seed++);
      std::string name = str_cat(dtype_name(dt), "_", k);
      ASSERT_TRUE(write_npy(dir.file(name + ".npy"), t).ok());
      const char* descr = dt == DType::kF32    ? "<f4"
                          : dt == DType::kF16  ? "<f2"
                          : dt == DType::kBF16 ? "<u2"
                          : dt == DType::kI64  ? "<i8"
                          : dt == DType::kI32  ? "<i4"
                          : dt == DType::kI16  ? "<i2"
                          : dt == DType::kI8   ? "|i1"
                          : dt == DType::kU8   ? "|u1"
                                               : "|b1";
      manifest << name << " " << descr << " " << (t.rank() ? shape_to_string(t.shape()) : "-") << " ";
      if (t.num_elements() == 0) manifest << "-";
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        if (i) manifest << ",";
        if (dt == DType::kBF16)
          manifest << t.data<uint16_t>()[i];  // raw bits, as numpy sees them
        else if (dt == DType::kI64)
          manifest << t.data<int64_t>()[i];
        else
          manifest << value_at(t, i);
      }
      manifest << "\n";
    }
  }
  manifest.close();
  std::string script = dir.file("check.py");
  std::ofstream(script) << R"PY(
import sys
import numpy as np
out = sys.argv[1]
n = 0
for line in open(out + '/manifest.txt'):
    name, descr, shape, values = line.split()
    path = '%s/%s.npy' % (out, name)
    with open(path, 'rb') as f:
        assert np.lib.format.read_magic(f) == (1, 0), name
        np.lib.format.read_array_header_1_0(f)
        assert f.tell() % 64 == 0, (name, f.tell())
    a = np.load(path)
    shape = () if shape == '-' else tuple(int(d) for d in shape.split('x'))
    assert a.dtype.str == descr, (name, a.dtype.str, descr)
    assert a.shape == shape, (name, a.shape, shape)
    vals = [] if values == '-' else values.split(',')
    if a.dtype.kind == 'f':
        want = np.array([float(v) for v in vals], np.float64)
        assert np.array_equal(a.ravel().astype(np.float64), want), (name, a, want)
    else:
        assert [int(v) for v in a.ravel()] == [int(v) for v in vals], (name, a, vals)
    n += 1
assert n == 9 * 6, n
)PY";
  EXPECT_EQ(testing::run_python(script, dir.path()), 0);
}

std::string npy_image(const std::string& dict, const std::string& data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += char(major);
  out += char(0);
  size_t n = dict.size();
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) out += char((n >> (8 * i)) & 0xff);
  return out + dict + data;
}

ErrorKind parse_kind(const std::string& bytes, std::optional<DType> as = std::nullopt, std::string* msg = nullptr) {
  auto r = parse_npy(bytes, as, "hostile.npy");
  if (msg) *msg = r.status().message();
  return r.status().kind();
}

TEST(Npy, HostileFiles) {
  const std::string f4x2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }\n";
  const std::string data8(8, '\0');
  std::string msg;
  EXPECT_EQ(parse_kind(npy_image(f4x2, data8)), ErrorKind::kOk);
  EXPECT_EQ(parse_kind(npy_image(f4x2, data8, 2)), ErrorKind::kOk);

  EXPECT_EQ(parse_kind(""), ErrorKind::kParse);
  EXPECT_EQ(parse_kind("\x93NUMPX\x01\x00\x10\x00"), ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image(f4x2, data8, 4)), ErrorKind::kUnsupported);
  EXPECT_EQ(parse_kind(std::string("\x93NUMPY\x01\x00\x10", 9)), ErrorKind::kIo);
  // Header length beyond the file.
  std::string cut = npy_image(f4x2, "");
  EXPECT_EQ(parse_kind(cut.substr(0, cut.size() - 5)), ErrorKind::kIo);
  // Truncated and oversized data.
  EXPECT_EQ(parse_kind(npy_image(f4x2, data8.substr(0, 7)), std::nullopt, &msg), ErrorKind::kIo);
  EXPECT_NE(msg.find("8"), std::string::npos) << msg;
  EXPECT_EQ(parse_kind(npy_image(f4x2, data8 + "x")), ErrorKind::kParse);
  // dtypes.
  EXPECT_EQ(parse_kind(npy_image("{'descr': '>f4', 'fortran_order': False, 'shape': (2,)}", data8)),
            ErrorKind::kUnsupported);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,)}", data8)),
            ErrorKind::kUnsupported);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<u2', 'fortran_order': False, 'shape': (4,)}", data8)),
            ErrorKind::kUnsupported);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<u2', 'fortran_order': False, 'shape': (4,)}", data8), DType::kBF16),
            ErrorKind::kOk);
  EXPECT_EQ(parse_kind(npy_image("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,)}", data8)),
            ErrorKind::kUnsupported);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}", data8)),
            ErrorKind::kUnsupported);
  // Header dict structure.
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'shape': (2,)}", data8)), ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': True}", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}", data8)), ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}", data8)), ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)", data8)), ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4, 'fortran_order': False, 'shape': (2,)}", data8)), ErrorKind::kParse);
  // Shapes whose element count or digits overflow, before any allocation.
  EXPECT_EQ(
      parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776)}", data8)),
      ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}", data8)),
            ErrorKind::kParse);
  // Huge but representable: the data check refuses it without allocating.
  EXPECT_EQ(parse_kind(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,)}", data8)),
            ErrorKind::kIo);
  EXPECT_EQ(read_npy("/nonexistent/x.npy").status().kind(), ErrorKind::kNotFound);
}

TEST(Npy, BoolNormalisedAndBf16WrittenAsU2) {
  auto t =
      parse_npy(npy_image("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x00\x02\x01", 3)));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->dtype(), DType::kI1);
  EXPECT_EQ(t->data<uint8_t>()[0], 0);
  EXPECT_EQ(t->data<uint8_t>()[1], 1);
  EXPECT_EQ(t->data<uint8_t>()[2], 1);

  Tensor b = testing::pattern_tensor(DType::kBF16, {2, 2}, 9);
  auto bytes = encode_npy(b);
  ASSERT_TRUE(bytes.ok());
  EXPECT_NE(bytes->find("'descr': '<u2'"), std::string::npos);
  EXPECT_EQ((bytes->size() - b.nbytes()) % 64, 0u);
  auto back = parse_npy(*bytes, DType::kBF16);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(testing::same_bytes(*back, b));
}

}  // namespace
}  // namespace hlx
