#include "core/status.h"

namespace hlx {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kOk:
      return "ok";
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kParse:
      return "parse error";
    case ErrorKind::kVerify:
      return "verification error";
    case ErrorKind::kUnsupported:
      return "unsupported";
    case ErrorKind::kIo:
      return "i/o error";
    case ErrorKind::kOutOfRange:
      return "out of range";
    case ErrorKind::kCapacityExceeded:
      return "capacity exceeded";
    case ErrorKind::kNotFound:
      return "not found";
    case ErrorKind::kInternal:
      return "internal error";
  }
  return "unknown error";
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return str_cat(error_kind_name(rep_->kind), ": ", rep_->message);
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(rep_->kind, str_cat(context, ": ", rep_->message));
}

}  // namespace hlx
