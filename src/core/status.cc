#include "memfit/core/status.h"

namespace memfit {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kIo:
      return "IO_ERROR";
    case ErrorCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case ErrorCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
    case ErrorCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

Error Error::with_context(std::string_view context) const {
  return Error(code_, std::string(context) + ": " + message_, detail_);
}

Error invalid_argument(std::string message) { return {ErrorCode::kInvalidArgument, std::move(message)}; }
Error not_found(std::string message) { return {ErrorCode::kNotFound, std::move(message)}; }
Error io_error(std::string message) { return {ErrorCode::kIo, std::move(message)}; }
Error resource_exhausted(std::string message, std::shared_ptr<const ErrorDetail> detail) {
  return {ErrorCode::kResourceExhausted, std::move(message), std::move(detail)};
}
Error failed_precondition(std::string message) {
  return {ErrorCode::kFailedPrecondition, std::move(message)};
}
Error unavailable(std::string message) { return {ErrorCode::kUnavailable, std::move(message)}; }
Error internal_error(std::string message) { return {ErrorCode::kInternal, std::move(message)}; }

}  // namespace memfit
