#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "io_test_util.h"

namespace hlx {
namespace {

using testing::TempDir;

// A safetensors image assembled by hand (independent of the writer).
std::string st_bytes(const std::string& header, const std::string& data,
                     std::optional<uint64_t> length_field = std::nullopt) {
  uint64_t n = length_field.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

ErrorKind open_kind(const std::string& bytes, std::string* message = nullptr) {
  auto r = SafetensorsFile::from_bytes(bytes, "hostile.safetensors");
  if (message) *message = r.status().message();
  return r.status().kind();
}

TEST(Safetensors, RoundTripEveryDType) {
  TempDir dir;
  NamedTensors tensors;
  uint32_t seed = 1;
  for (DType t : kAllDTypes) {
    std::string n(dtype_safetensors_name(t));
    tensors.emplace_back("w." + n, testing::pattern_tensor(t, {3, 5}, seed++));
    tensors.emplace_back("scalar." + n, testing::pattern_tensor(t, {}, seed++));
    tensors.emplace_back("empty." + n, testing::pattern_tensor(t, {0, 4}, seed++));
  }
  std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "hlx test"}};
  std::string path = dir.file("all.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, meta).ok());

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->size(), tensors.size());
  EXPECT_EQ(f->metadata(), meta);
  for (const auto& [name, expected] : tensors) {
    auto t = f->tensor(name);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_TRUE(testing::same_bytes(*t, expected)) << name << " " << t->type_string();
  }
  // The in-memory serialisation is byte-identical to the file.
  auto mem = serialize_safetensors(tensors, meta);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(*mem, testing::read_bytes(path));
}

TEST(Safetensors, WritesF8E4m3Bytes) {
  TempDir dir;
  NamedTensors tensors{{"q", testing::pattern_tensor(DType::kU8, {2, 3}, 7)},
                       {"u", testing::pattern_tensor(DType::kU8, {2}, 8)}};
  std::string path = dir.file("f8.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {}, {"q"}).ok());
  EXPECT_NE(testing::read_bytes(path).find(R"("q":{"dtype":"F8_E4M3")"), std::string::npos);
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_TRUE(f->entry("q")->f8_e4m3);
  EXPECT_FALSE(f->entry("u")->f8_e4m3);
  EXPECT_TRUE(testing::same_bytes(*f->tensor("q"), tensors[0].second));
  // Only raw bytes can be labelled F8_E4M3.
  NamedTensors wide{{"q", testing::pattern_tensor(DType::kF32, {2}, 9)}};
  Status st = write_safetensors(dir.file("bad.safetensors"), wide, {}, {"q"});
  EXPECT_EQ(st.kind(), ErrorKind::kInvalidArgument);
}

TEST(Safetensors, WriterPadsHeaderWithSpacesToEightBytes) {
  NamedTensors tensors{{"a", testing::pattern_tensor(DType::kF32, {3}, 7)}};
  auto bytes = serialize_safetensors(tensors);
  ASSERT_TRUE(bytes.ok());
  uint64_t n = 0;
  std::memcpy(&n, bytes->data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes->size(), 8 + n + 12);
  std::string header = bytes->substr(8, n);
  EXPECT_EQ(header.front(), '{');
  size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos);
  EXPECT_NE(header.find("\"data_offsets\":[0,12]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"dtype\":\"F32\""), std::string::npos) << header;
}

// A hand-written file with an unaligned F32 tensor: values land where the offsets say.
TEST(Safetensors, ReadsHandWrittenFileWithUnalignedOffsets) {
  float vals[2] = {1.5f, -2.25f};
  std::string data = "\x07";
  data.append(reinterpret_cast<const char*>(vals), 8);
  std::string header =
      R"({"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"f":{"dtype":"F32","shape":[2],"data_offsets":[1,9]},"__metadata__":{"k":"v"}})";
  auto f = SafetensorsFile::from_bytes(st_bytes(header, data));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->names(), (std::vector<std::string>{"b", "f"}));
  auto t = f->tensor("f");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shape(), (Shape{2}));
  float got[2];
  std::memcpy(got, t->raw(), 8);  // unaligned: copy rather than dereference
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.25f);
  EXPECT_EQ(*f->tensor("b")->data<uint8_t>(), 7);
  EXPECT_EQ(f->metadata().at("k"), "v");
}

// Returns true when [p, p+1) lies inside a mapping of `path` per /proc/self/maps.
bool address_maps_file(const void* p, const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  auto addr = reinterpret_cast<uintptr_t>(p);
  std::string canonical = std::filesystem::canonical(path).string();
  while (std::getline(maps, line)) {
    uintptr_t lo, hi;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr < hi) return line.size() >= canonical.size() && line.ends_with(canonical);
  }
  return false;
}

TEST(Safetensors, TensorsBorrowTheMapping) {
  TempDir dir;
  NamedTensors tensors{{"a", testing::pattern_tensor(DType::kBF16, {64, 32}, 1)},
                       {"b", testing::pattern_tensor(DType::kF32, {16}, 2)}};
  std::string path = dir.file("m.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  Tensor a, b;
  {
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.ok());
    a = *f->tensor("a");
    b = *f->tensor("b");
  }  // the file object is gone; the tensors keep the mapping alive
  EXPECT_TRUE(address_maps_file(a.raw(), path));
  EXPECT_TRUE(address_maps_file(b.raw(), path));
  // Adjacent in the file means adjacent in memory: no copies were made.
  EXPECT_EQ(static_cast<const char*>(b.raw()) - static_cast<const char*>(a.raw()), int64_t(a.nbytes()));
  EXPECT_EQ(a.storage(), b.storage());
  EXPECT_TRUE(testing::same_bytes(a, tensors[0].second));
  EXPECT_TRUE(testing::same_bytes(b, tensors[1].second));
}

TEST(Safetensors, ReadableByIndependentNumpyReader) {
  TempDir dir;
  NamedTensors tensors{{"x", testing::pattern_tensor(DType::kF32, {2, 3}, 3)},
                       {"y", testing::pattern_tensor(DType::kI64, {4}, 4)},
                       {"z", testing::pattern_tensor(DType::kI1, {5}, 5)}};
  std::string path = dir.file("t.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {{"who", "hlx"}}).ok());
  std::ostringstream expect;
  expect.precision(9);  // round-trips every f32 exactly
  for (const auto& [name, t] : tensors) {
    expect << name << " " << dtype_name(t.dtype()) << " ";
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (t.dtype() == DType::kF32) expect << t.data<float>()[i] << ",";
      if (t.dtype() == DType::kI64) expect << t.data<int64_t>()[i] << ",";
      if (t.dtype() == DType::kI1) expect << int(t.data<uint8_t>()[i]) << ",";
    }
    expect << "\n";
  }
  // Reads the file with json + numpy only, following the published format.
  std::string script = dir.file("check.py");
  std::ofstream(script) << R"PY(
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], 'rb').read()
(n,) = struct.unpack('<Q', raw[:8])
assert n % 8 == 0, n
hdr = json.loads(raw[8:8 + n])
assert hdr['__metadata__'] == {'who': 'hlx'}, hdr
data = raw[8 + n:]
np_types = {'F32': np.float32, 'I64': np.int64, 'BOOL': np.bool_}
x = np.frombuffer(data[slice(*hdr['x']['data_offsets'])], np.float32).reshape(hdr['x']['shape'])
assert x.shape == (2, 3) and hdr['x']['dtype'] == 'F32'
y = np.frombuffer(data[slice(*hdr['y']['data_offsets'])], np.int64)
z = np.frombuffer(data[slice(*hdr['z']['data_offsets'])], np.bool_)
assert hdr['z']['dtype'] == 'BOOL'
expect = {}
for line in open(sys.argv[2]):
    name, _, vals = line.split()
    expect[name] = [v for v in vals.split(',') if v]
assert list(x.ravel()) == [np.float32(v) for v in expect['x']], (x, expect['x'])
assert list(y) == [int(v) for v in expect['y']], (y, expect['y'])
assert list(z.astype(int)) == [int(v) for v in expect['z']]
assert hdr['y']['data_offsets'][0] == 24 and hdr['z']['data_offsets'] == [56, 61]
)PY";
  std::ofstream(dir.file("expect.txt")) << expect.str();
  EXPECT_EQ(testing::run_python(script, path + " " + dir.file("expect.txt")), 0);
}

TEST(Safetensors, HostileFiles) {
  const std::string f4 = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  const std::string data8(8, '\x01');
  std::string msg;

  EXPECT_EQ(open_kind(""), ErrorKind::kIo);
  EXPECT_EQ(open_kind("\x05\0\0"), ErrorKind::kIo);
  // Length field larger than the file.
  EXPECT_EQ(open_kind(st_bytes("{}", "", 1000), &msg), ErrorKind::kIo);
  EXPECT_NE(msg.find("1000"), std::string::npos) << msg;
  // Length field above the 100 MiB limit (and far beyond the file).
  EXPECT_EQ(open_kind(st_bytes("{}", "", uint64_t(1) << 40)), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes("{}", "", ~uint64_t(0))), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes("", "")), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes("{\"a\":", "")), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes("[1,2]", "")), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes("{\"a\": 3}", "")), ErrorKind::kParse);
  // Unsupported dtype names the tensor and the dtype.
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data8), &msg),
            ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("F64"), std::string::npos) << msg;
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", data8)), ErrorKind::kParse);
  // 8-bit floats: E4M3 (float8_e4m3fn) is read as raw bytes; E5M2 is unsupported, by name.
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F8_E5M2","shape":[8],"data_offsets":[0,8]}})", data8), &msg),
            ErrorKind::kUnsupported);
  EXPECT_NE(msg.find("F8_E5M2"), std::string::npos) << msg;
  auto f8 =
      SafetensorsFile::from_bytes(st_bytes(R"({"w":{"dtype":"F8_E4M3","shape":[2,4],"data_offsets":[0,8]}})", data8));
  ASSERT_TRUE(f8.ok()) << f8.status().to_string();
  EXPECT_TRUE(f8->entry("w")->f8_e4m3);
  EXPECT_EQ(f8->tensor("w")->dtype(), DType::kU8);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F8_E4M3","shape":[2,4],"data_offsets":[0,4]}})", data8.substr(0, 4))),
            ErrorKind::kParse);
  // Shapes: negative, float, string, overflowing.
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(
      open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", data8),
                &msg),
      ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", data8)), ErrorKind::kParse);
  // Offsets: reversed, negative, wrong arity, past the end, wrong byte count.
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8)), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8)),
            ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", data8)), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data8), &msg),
            ErrorKind::kIo);
  EXPECT_NE(msg.find("16"), std::string::npos) << msg;
  EXPECT_EQ(open_kind(st_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8), &msg),
            ErrorKind::kParse);
  EXPECT_NE(msg.find("12"), std::string::npos) << msg;
  // Overlap names both tensors.
  EXPECT_EQ(
      open_kind(st_bytes(R"({"a":{)" + f4 + R"(},"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", data8), &msg),
      ErrorKind::kParse);
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  // A hole between tensors, trailing bytes, and a missing prefix.
  EXPECT_EQ(
      open_kind(st_bytes(
          R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
          "abcdef")),
      ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"a":{)" + f4 + "}}", data8 + "xx")), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})", data8)), ErrorKind::kParse);
  // Metadata must be a string map.
  EXPECT_EQ(open_kind(st_bytes(R"({"__metadata__":{"k":1}})", "")), ErrorKind::kParse);
  EXPECT_EQ(open_kind(st_bytes(R"({"__metadata__":[]})", "")), ErrorKind::kParse);
  // Sanity: the well-formed variant of the above is accepted.
  EXPECT_EQ(open_kind(st_bytes(R"({"a":{)" + f4 + "}}", data8)), ErrorKind::kOk);
  EXPECT_EQ(open_kind(st_bytes("{}", "")), ErrorKind::kOk);
}

TEST(Safetensors, HostileFileOnDiskAndMissingFiles) {
  TempDir dir;
  std::string path = dir.file("trunc.safetensors");
  // A valid file cut short inside the data section.
  auto good = serialize_safetensors({{"a", testing::pattern_tensor(DType::kF32, {16}, 1)}});
  ASSERT_TRUE(good.ok());
  testing::write_bytes(path, good->substr(0, good->size() - 5));
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.status().kind(), ErrorKind::kIo) << f.status().to_string();
  EXPECT_NE(f.status().message().find(path), std::string::npos);
  testing::write_bytes(dir.file("empty.safetensors"), "");
  EXPECT_EQ(SafetensorsFile::open(dir.file("empty.safetensors")).status().kind(), ErrorKind::kIo);
  EXPECT_EQ(SafetensorsFile::open(dir.file("nope.safetensors")).status().kind(), ErrorKind::kNotFound);
  EXPECT_EQ(SafetensorsFile::open(dir.path()).status().kind(), ErrorKind::kIo);
  testing::write_bytes(path, *good);
  auto ok = SafetensorsFile::open(path);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->tensor("missing").status().kind(), ErrorKind::kNotFound);
}

TEST(Safetensors, WriterRejectsBadNames) {
  Tensor t = testing::pattern_tensor(DType::kF32, {2}, 1);
  EXPECT_EQ(serialize_safetensors({{"a", t}, {"a", t}}).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(serialize_safetensors({{"__metadata__", t}}).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(serialize_safetensors({{"", t}}).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(serialize_safetensors({{"\xff\xfe", t}}).status().kind(), ErrorKind::kInvalidArgument);
  EXPECT_EQ(serialize_safetensors({{"u", Tensor::borrow(DType::kF32, {2}, nullptr, nullptr)}}).status().kind(),
            ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace hlx
