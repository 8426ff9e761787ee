#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace hlx::server {

const char* error_type_for(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 504:
      return "timeout_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string ApiError::to_json() const {
  nlohmann::ordered_json e = {
      {"message", message},
      {"type", type.empty() ? error_type_for(status) : type},
      {"param", param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param)},
      {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)}};
  // Replace invalid UTF-8 (e.g. echoed request bytes) instead of throwing.
  return nlohmann::ordered_json{{"error", e}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError from_status(const Status& status, std::string param) {
  switch (status.kind()) {
    case ErrorKind::kOk:
      return ApiError{};
    case ErrorKind::kCapacityExceeded:
      return ApiError{400, status.message(), "invalid_request_error", std::move(param), "context_length_exceeded"};
    case ErrorKind::kInvalidArgument:
    case ErrorKind::kParse:
    case ErrorKind::kOutOfRange:
    case ErrorKind::kUnsupported:
    case ErrorKind::kNotFound:
    case ErrorKind::kIo:
      return bad_request(status.message(), std::move(param));
    default:
      return ApiError{500, status.to_string(), "server_error", "", "internal_error"};
  }
}

}  // namespace hlx::server
