#include "io/npy.h"

#include <bit>
#include <cstring>
#include <map>

#include "io/file.h"

namespace hlx {

static_assert(std::endian::native == std::endian::little, "npy and safetensors I/O assume a little-endian host");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct DescrInfo {
  const char* descr;
  DType dtype;
};
// The spelling numpy writes first; '<' is also accepted for the one-byte types on read.
constexpr DescrInfo kDescrs[] = {
    {"<f4", DType::kF32}, {"<f2", DType::kF16}, {"<i8", DType::kI64}, {"<i4", DType::kI32},
    {"<i2", DType::kI16}, {"|i1", DType::kI8},  {"|u1", DType::kU8},  {"|b1", DType::kI1},
};

// A parsed value from the header dict: a string, a bool or a tuple of ints.
struct PyValue {
  enum Kind { kString, kBool, kTuple } kind = kString;
  std::string str;
  bool boolean = false;
  Shape tuple;
};

// Recursive-descent parser for the tiny Python literal subset numpy writes in headers, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  Result<std::map<std::string, PyValue>> parse_dict() {
    std::map<std::string, PyValue> out;
    skip_ws();
    if (!eat('{')) return error("expected '{'");
    skip_ws();
    while (!eat('}')) {
      HLX_ASSIGN_OR_RETURN(std::string key, parse_string());
      skip_ws();
      if (!eat(':')) return error("expected ':' after key '", key, "'");
      skip_ws();
      HLX_ASSIGN_OR_RETURN(PyValue value, parse_value(key));
      if (!out.emplace(key, std::move(value)).second) return error("duplicate key '", key, "'");
      skip_ws();
      if (eat(',')) {
        skip_ws();
      } else if (peek() != '}') {
        return error("expected ',' or '}'");
      }
    }
    skip_ws();
    if (pos_ != s_.size()) return error("unexpected text after the header dict");
    return out;
  }

 private:
  template <class... Args>
  Status error(const Args&... args) const {
    return make_error(ErrorKind::kParse, source_, ": npy header at offset ", pos_, ": ", args...);
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) {
    if (peek() != c || pos_ >= s_.size()) return false;
    ++pos_;
    return true;
  }
  bool eat_word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }

  Result<std::string> parse_string() {
    char q = peek();
    if (q != '\'' && q != '"') return error("expected a quoted string");
    ++pos_;
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != q) {
      if (s_[pos_] == '\\') return error("escape sequences are not supported in header strings");
      ++pos_;
    }
    if (pos_ >= s_.size()) return error("unterminated string");
    std::string out(s_.substr(start, pos_ - start));
    ++pos_;
    return out;
  }

  Result<int64_t> parse_int() {
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      int digit = s_[pos_] - '0';
      if (v > (INT64_MAX - digit) / 10) return error("dimension does not fit in int64");
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) return error("expected a non-negative integer");
    eat('L');  // Python 2 long suffix in old files
    return v;
  }

  Result<PyValue> parse_value(const std::string& key) {
    PyValue v;
    char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = PyValue::kString;
      HLX_ASSIGN_OR_RETURN(v.str, parse_string());
    } else if (eat_word("True")) {
      v.kind = PyValue::kBool;
      v.boolean = true;
    } else if (eat_word("False")) {
      v.kind = PyValue::kBool;
      v.boolean = false;
    } else if (eat('(')) {
      v.kind = PyValue::kTuple;
      skip_ws();
      bool trailing_comma = false;
      while (!eat(')')) {
        HLX_ASSIGN_OR_RETURN(int64_t d, parse_int());
        v.tuple.push_back(d);
        skip_ws();
        trailing_comma = eat(',');
        skip_ws();
        if (!trailing_comma && peek() != ')') return error("expected ',' or ')' in tuple");
      }
      // "(3)" is the integer 3 in Python, not a tuple.
      if (v.tuple.size() == 1 && !trailing_comma) return error("'", key, "' is a parenthesised integer, not a tuple");
    } else if (c == '[' || c == '{') {
      return make_error(ErrorKind::kUnsupported, source_, ": npy header value for '", key,
                        "' is a list or dict (structured dtypes are not supported)");
    } else {
      return error("unsupported value for '", key, "'");
    }
    return v;
  }

  std::string_view s_;
  const std::string& source_;
  size_t pos_ = 0;
};

Result<DType> dtype_from_descr(const std::string& descr, std::optional<DType> u16_as, const std::string& source) {
  for (const auto& d : kDescrs) {
    if (descr == d.descr) return d.dtype;
    // One-byte types have no byte order; accept '<' and '=' spellings too.
    if (dtype_size(d.dtype) == 1 && descr.size() == 3 && (descr[0] == '<' || descr[0] == '=') &&
        descr.substr(1) == std::string(d.descr + 1))
      return d.dtype;
  }
  if (descr == "<u2") {
    if (!u16_as)
      return make_error(ErrorKind::kUnsupported, source,
                        ": npy dtype '<u2' (uint16) needs reinterpret_u16_as "
                        "(bf16 is stored as its uint16 bits)");
    return *u16_as;
  }
  if (!descr.empty() && descr[0] == '>')
    return make_error(ErrorKind::kUnsupported, source, ": npy dtype '", descr,
                      "' is big-endian; only little-endian is supported");
  return make_error(ErrorKind::kUnsupported, source, ": npy dtype '", descr,
                    "' is not supported (supported: <f4 <f2 <i8 <i4 <i2 |i1 |u1 |b1, and <u2 as bf16)");
}

const char* descr_for(DType t) {
  if (t == DType::kBF16) return "<u2";
  for (const auto& d : kDescrs)
    if (d.dtype == t) return d.descr;
  return nullptr;
}

}  // namespace

Result<NpyHeader> parse_npy_header(std::string_view bytes, const std::string& source) {
  if (bytes.size() < kMagicLen + 2 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    return make_error(ErrorKind::kParse, source, ": not an npy file (missing \\x93NUMPY magic)");
  NpyHeader h;
  h.major = uint8_t(bytes[6]);
  h.minor = uint8_t(bytes[7]);
  size_t len_bytes;
  if (h.major == 1) {
    len_bytes = 2;
  } else if (h.major == 2 || h.major == 3) {
    len_bytes = 4;
  } else {
    return make_error(ErrorKind::kUnsupported, source, ": npy format version ", h.major, ".", h.minor,
                      " is not supported");
  }
  if (bytes.size() < 8 + len_bytes)
    return make_error(ErrorKind::kIo, source, ": file ends inside the npy header length field");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i) header_len |= size_t(uint8_t(bytes[8 + i])) << (8 * i);
  size_t header_start = 8 + len_bytes;
  if (header_len > bytes.size() - header_start)
    return make_error(ErrorKind::kIo, source, ": npy header length ", header_len, " exceeds the ",
                      bytes.size() - header_start, " bytes that follow (truncated file?)");
  h.data_offset = header_start + header_len;

  HeaderParser parser(bytes.substr(header_start, header_len), source);
  HLX_ASSIGN_OR_RETURN(auto dict, parser.parse_dict());
  auto field = [&](const char* key, PyValue::Kind kind) -> Result<const PyValue*> {
    auto it = dict.find(key);
    if (it == dict.end()) return make_error(ErrorKind::kParse, source, ": npy header lacks '", key, "'");
    if (it->second.kind != kind)
      return make_error(ErrorKind::kParse, source, ": npy header '", key, "' has the wrong type");
    return &it->second;
  };
  HLX_ASSIGN_OR_RETURN(const PyValue* descr, field("descr", PyValue::kString));
  HLX_ASSIGN_OR_RETURN(const PyValue* fortran, field("fortran_order", PyValue::kBool));
  HLX_ASSIGN_OR_RETURN(const PyValue* shape, field("shape", PyValue::kTuple));
  if (dict.size() != 3)
    return make_error(ErrorKind::kParse, source, ": npy header has ", dict.size(),
                      " keys; expected exactly descr, fortran_order, shape");
  h.descr = descr->str;
  h.fortran_order = fortran->boolean;
  h.shape = shape->tuple;
  return h;
}

Result<Tensor> parse_npy(std::string_view bytes, std::optional<DType> reinterpret_u16_as, const std::string& source) {
  if (reinterpret_u16_as && dtype_size(*reinterpret_u16_as) != 2)
    return make_error(ErrorKind::kInvalidArgument, source, ": reinterpret_u16_as must be a 2-byte dtype, got ",
                      dtype_name(*reinterpret_u16_as));
  HLX_ASSIGN_OR_RETURN(NpyHeader h, parse_npy_header(bytes, source));
  HLX_ASSIGN_OR_RETURN(DType dtype, dtype_from_descr(h.descr, reinterpret_u16_as, source));
  if (h.fortran_order)
    return make_error(ErrorKind::kUnsupported, source, ": npy array is in Fortran order; save it C-contiguous");
  auto count = checked_num_elements(h.shape);
  if (!count.ok())
    return make_error(ErrorKind::kParse, source, ": npy shape (", shape_to_string(h.shape),
                      "): ", count.status().message());
  size_t avail = bytes.size() - h.data_offset;
  // count <= 2^48 and itemsize <= 8: the product cannot overflow.
  uint64_t need = uint64_t(*count) * dtype_size(dtype);
  if (avail < need)
    return make_error(ErrorKind::kIo, source, ": npy ", h.descr, " shape (", shape_to_string(h.shape), ") needs ", need,
                      " data bytes but the file has ", avail, " (truncated?)");
  if (avail > need)
    return make_error(ErrorKind::kParse, source, ": npy ", h.descr, " shape (", shape_to_string(h.shape), ") needs ",
                      need, " data bytes but ", avail - need, " extra bytes follow");
  Tensor t = Tensor::empty(dtype, h.shape);
  if (need) std::memcpy(t.raw(), bytes.data() + h.data_offset, need);
  if (dtype == DType::kI1) {
    auto* p = t.data<uint8_t>();
    for (size_t i = 0; i < need; ++i) p[i] = p[i] != 0;
  }
  return t;
}

Result<Tensor> read_npy(const std::string& path, std::optional<DType> reinterpret_u16_as) {
  HLX_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  return parse_npy(bytes, reinterpret_u16_as, path);
}

Result<std::string> encode_npy(const Tensor& t) {
  const char* descr = descr_for(t.dtype());
  if (!descr) return make_error(ErrorKind::kUnsupported, "npy writer: no npy dtype for ", dtype_name(t.dtype()));
  if (!t.defined())
    return make_error(ErrorKind::kInvalidArgument, "npy writer: tensor ", t.type_string(), " has no data");
  std::string dict = str_cat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (");
  for (size_t i = 0; i < t.shape().size(); ++i) dict += str_cat(i ? ", " : "", t.shape()[i]);
  dict += t.shape().size() == 1 ? ",), }" : "), }";

  // numpy pads with spaces and ends with '\n' so the data starts 64-byte aligned.
  int major = 1;
  size_t prefix = 10;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  if (total - prefix > 65535) {
    major = 2;
    prefix = 12;
    total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  }
  size_t header_len = total - prefix;
  dict.append(header_len - dict.size() - 1, ' ');
  dict += '\n';

  std::string out(kMagic, kMagicLen);
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < prefix - 8; ++i) out += char((header_len >> (8 * i)) & 0xff);
  out += dict;
  size_t data_start = out.size();
  if (t.nbytes()) out.append(static_cast<const char*>(t.raw()), t.nbytes());
  if (t.dtype() == DType::kI1)
    for (size_t i = data_start; i < out.size(); ++i) out[i] = out[i] != 0;
  return out;
}

Status write_npy(const std::string& path, const Tensor& tensor) {
  HLX_ASSIGN_OR_RETURN(std::string bytes, encode_npy(tensor));
  return write_file(path, bytes);
}

}  // namespace hlx
