// Typed errors for every layer: an error kind plus a message that names the offending values.
// Library code never aborts on bad input; it returns a Status or a Result<T>.
#pragma once

#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace hlx {

enum class ErrorKind {
  kOk = 0,
  kInvalidArgument,   // caller passed something malformed (shape, dtype, count, option)
  kParse,             // text (MLIR, JSON, headers) does not follow its grammar
  kVerify,            // IR is well-formed text but breaks a StableHLO rule
  kUnsupported,       // valid input that hlx does not implement (op, dtype, option)
  kIo,                // file system or mmap failure, truncated or corrupt file
  kOutOfRange,        // index, position or offset outside its allowed range
  kCapacityExceeded,  // a request does not fit the configured context capacity
  kNotFound,          // named entity (tensor, entry, file) missing
  kInternal,          // a bug in hlx
};

const char* error_kind_name(ErrorKind kind);

// Concatenates any streamable values into a string: str_cat("shape ", 3, "x", 4).
template <class... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Cheap when ok (a null pointer); the error case owns kind + message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorKind kind, std::string message)
      : rep_(kind == ErrorKind::kOk ? nullptr : std::make_shared<Rep>(Rep{kind, std::move(message)})) {}

  bool ok() const { return rep_ == nullptr; }
  ErrorKind kind() const { return rep_ ? rep_->kind : ErrorKind::kOk; }
  const std::string& message() const;
  // "parse error: line 3: expected ':'"
  std::string to_string() const;
  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(const std::string& context) const;

 private:
  struct Rep {
    ErrorKind kind;
    std::string message;
  };
  std::shared_ptr<const Rep> rep_;
};

inline Status ok_status() { return Status(); }

template <class... Args>
Status make_error(ErrorKind kind, const Args&... args) {
  return Status(kind, str_cat(args...));
}

// A value or an error. Access the value only after checking ok().
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorKind::kInternal, "Result constructed from an ok Status");
  }

  bool ok() const { return v_.index() == 0; }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace hlx

#define HLX_CONCAT_INNER(a, b) a##b
#define HLX_CONCAT(a, b) HLX_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` fails.
#define HLX_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::hlx::Status hlx_status_ = (expr);        \
    if (!hlx_status_.ok()) return hlx_status_; \
  } while (0)

// HLX_ASSIGN_OR_RETURN(auto x, compute()); declares x from a Result or returns its error.
#define HLX_ASSIGN_OR_RETURN(lhs, expr) HLX_ASSIGN_OR_RETURN_IMPL(HLX_CONCAT(hlx_result_, __LINE__), lhs, expr)
#define HLX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
