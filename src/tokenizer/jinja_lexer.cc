// Lexer: template source -> tokens (text, {{ }} and {% %} delimiters, names, literals, operators),
// applying jinja2's whitespace control (trim_blocks, lstrip_blocks, '-' and '+' tag modifiers).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/jinja_internal.h"

namespace hlx::jinja::internal {
namespace {

class Lexer {
 public:
  Lexer(std::string src, const Options& opt) : src_(std::move(src)), opt_(opt) {
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  Result<std::vector<Token>> run() {
    size_t p = 0, n = src_.size();
    while (p < n) {
      size_t tag = p;
      while (true) {
        tag = src_.find('{', tag);
        if (tag == std::string::npos || tag + 1 >= n) {
          tag = std::string::npos;
          break;
        }
        char c = src_[tag + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++tag;
      }
      if (tag == std::string::npos) {
        emit_text(src_.substr(p), p);
        break;
      }
      std::string text = src_.substr(p, tag - p);
      char kind = src_[tag + 1];
      size_t q = tag + 2;
      char mod = (q < n && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
      if (mod) ++q;
      if (mod == '-') {
        text = rstrip_ws(text);
      } else if (mod != '+' && opt_.lstrip_blocks && kind != '{') {
        // jinja2: strip spaces before the tag when only whitespace precedes it on its line.
        size_t l = text.rfind('\n');
        size_t lpos = l == std::string::npos ? 0 : l + 1;
        bool line_starting = p == 0 || src_[p - 1] == '\n';
        if (lpos > 0 || line_starting) {
          bool all_ws = true;
          for (size_t i = lpos; i < text.size(); ++i)
            if (!(text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\v' || text[i] == '\f'))
              all_ws = false;
          if (all_ws) text.resize(lpos);
        }
      }
      emit_text(std::move(text), p);
      if (kind == '#') {
        size_t end = src_.find("#}", q);
        if (end == std::string::npos) return make_error(ErrorKind::kParse, at(pos(tag)), "unclosed comment '{#'");
        bool strip = end > q && src_[end - 1] == '-';
        p = end + 2;
        p = after_tag(p, strip);
        continue;
      }
      bool block = kind == '%';
      toks_.push_back({block ? T::BlockBegin : T::VarBegin, "", 0, 0, pos(tag)});
      HLX_ASSIGN_OR_RETURN(p, lex_tag(q, block));
    }
    toks_.push_back({T::Eof, "", 0, 0, pos(n)});
    return std::move(toks_);
  }

 private:
  Pos pos(size_t off) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    Pos p;
    p.line = static_cast<int>(it - line_starts_.begin()) + 1;
    size_t ls = it == line_starts_.begin() ? 0 : *(it - 1);
    p.col = static_cast<int>(off - ls) + 1;
    return p;
  }

  static bool ascii_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

  static std::string rstrip_ws(const std::string& s) {
    std::vector<int32_t> cps = decode_utf8(s);
    size_t e = cps.size();
    while (e > 0 && py_space(cps[e - 1])) --e;
    return encode_utf8(cps, 0, e);
  }

  void emit_text(std::string text, size_t off) {
    if (!text.empty()) toks_.push_back({T::Text, std::move(text), 0, 0, pos(off)});
  }

  // After a closing tag: '-' strips all following whitespace, trim_blocks one newline.
  size_t after_tag(size_t p, bool strip, bool block = true) {
    if (strip) {
      while (p < src_.size() && ascii_ws(src_[p])) ++p;
    } else if (block && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  Result<size_t> lex_tag(size_t p, bool block) {
    const std::string end = block ? "%}" : "}}";
    size_t n = src_.size();
    while (true) {
      while (p < n && ascii_ws(src_[p])) ++p;
      if (p >= n) return make_error(ErrorKind::kParse, at(pos(p)), "unexpected end of template, expected '", end, "'");
      if (src_.compare(p, 2, end) == 0 || (src_[p] == '-' && src_.compare(p + 1, 2, end) == 0)) {
        bool strip = src_[p] == '-';
        toks_.push_back({block ? T::BlockEnd : T::VarEnd, "", 0, 0, pos(p)});
        return after_tag(p + (strip ? 3 : 2), strip, block);
      }
      char c = src_[p];
      Pos ps = pos(p);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = p;
        while (p < n && (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        toks_.push_back({T::Name, src_.substr(b, p - b), 0, 0, ps});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = p;
        while (p < n && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
        bool is_float = false;
        if (p + 1 < n && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
          is_float = true;
          ++p;
          while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
        if (p < n && (src_[p] == 'e' || src_[p] == 'E')) {
          size_t e = p + 1;
          if (e < n && (src_[e] == '+' || src_[e] == '-')) ++e;
          if (e < n && std::isdigit(static_cast<unsigned char>(src_[e]))) {
            is_float = true;
            p = e;
            while (p < n && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
          }
        }
        std::string lit;
        for (size_t i = b; i < p; ++i)
          if (src_[i] != '_') lit.push_back(src_[i]);
        Token t{is_float ? T::Float : T::Int, lit, 0, 0, ps};
        if (is_float) {
          t.f = std::strtod(lit.c_str(), nullptr);
        } else {
          errno = 0;
          char* endp = nullptr;
          long long v = std::strtoll(lit.c_str(), &endp, 10);
          if (errno == ERANGE)
            return make_error(ErrorKind::kUnsupported, at(ps), "integer literal ", lit, " does not fit in 64 bits");
          t.i = v;
        }
        toks_.push_back(std::move(t));
      } else if (c == '\'' || c == '"') {
        HLX_ASSIGN_OR_RETURN(p, lex_string(p));
      } else {
        static const char* ops[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                    ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
        bool found = false;
        for (const char* op : ops) {
          size_t len = std::char_traits<char>::length(op);
          if (src_.compare(p, len, op) == 0) {
            toks_.push_back({T::Op, op, 0, 0, ps});
            p += len;
            found = true;
            break;
          }
        }
        if (!found) return make_error(ErrorKind::kParse, at(ps), "unexpected character '", c, "'");
      }
    }
  }

  // Python string literal escapes (jinja2 decodes with unicode-escape).
  Result<size_t> lex_string(size_t p) {
    Pos ps = pos(p);
    char q = src_[p++];
    std::string out;
    size_t n = src_.size();
    while (true) {
      if (p >= n) return make_error(ErrorKind::kParse, at(ps), "unterminated string literal");
      char c = src_[p];
      if (c == q) {
        ++p;
        break;
      }
      if (c != '\\') {
        out.push_back(c);
        ++p;
        continue;
      }
      if (p + 1 >= n) return make_error(ErrorKind::kParse, at(ps), "unterminated string literal");
      char e = src_[p + 1];
      p += 2;
      auto hex = [&](int digits) -> Result<int32_t> {
        if (p + static_cast<size_t>(digits) > n)
          return make_error(ErrorKind::kParse, at(ps), "truncated \\x/\\u escape in string");
        int32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          char h = src_[p++];
          int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                  : (h >= 'a' && h <= 'f')                    ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F')                    ? h - 'A' + 10
                                                              : -1;
          if (d < 0) return make_error(ErrorKind::kParse, at(ps), "bad hex digit in escape");
          v = v * 16 + d;
        }
        return v;
      };
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case '\n':
          break;  // line continuation
        case 'x': {
          HLX_ASSIGN_OR_RETURN(int32_t v, hex(2));
          append_utf8(out, v);
          break;
        }
        case 'u': {
          HLX_ASSIGN_OR_RETURN(int32_t v, hex(4));
          append_utf8(out, v);
          break;
        }
        case 'U': {
          HLX_ASSIGN_OR_RETURN(int32_t v, hex(8));
          if (v > 0x10FFFF) return make_error(ErrorKind::kParse, at(ps), "\\U escape out of range");
          append_utf8(out, v);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            int32_t v = e - '0';
            for (int k = 0; k < 2 && p < n && src_[p] >= '0' && src_[p] <= '7'; ++k) v = v * 8 + (src_[p++] - '0');
            append_utf8(out, v);
          } else {  // unknown escapes keep their backslash, as in Python
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    toks_.push_back({T::Str, std::move(out), 0, 0, ps});
    return p;
  }

  std::string src_;
  Options opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> toks_;
};

}  // namespace

Result<std::vector<Token>> lex(std::string source, const Options& options) {
  Lexer lexer(std::move(source), options);
  return lexer.run();
}

}  // namespace hlx::jinja::internal
