// Errors the server answers with, in the OpenAI shape:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
#pragma once

#include <string>

#include "core/status.h"

namespace hlx::server {

struct ApiError {
  int status = 0;  // HTTP status; 0 = no error
  std::string message;
  std::string type;   // "invalid_request_error", "authentication_error", ...
  std::string param;  // the offending request field, or empty (null in JSON)
  std::string code;   // machine-readable reason, or empty (null in JSON)

  bool ok() const { return status == 0; }
  std::string to_json() const;
};

// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string message, std::string param = "", std::string code = "");
// The OpenAI type for a status (400 -> invalid_request_error, 401 -> authentication_error, ...).
const char* error_type_for(int status);
// Maps an hlx Status from a library call on request data: kInvalidArgument/kParse/kOutOfRange/
// kUnsupported/kNotFound -> 400, kCapacityExceeded -> 400 context_length_exceeded, kIo -> 400
// (request data was unreadable), kInternal and the rest -> 500.
ApiError from_status(const Status& status, std::string param = "");

}  // namespace hlx::server
