// memfit/core/status.h - the one error type used everywhere.
//
// Every fallible function returns `Expected<T>` (a value or an `Error`) or `Status` (= `Expected<void>`).
// No `bool` + `std::string*` out-parameters, no exceptions across layer boundaries.
// An `Error` carries a code (which decides the CLI exit status), a one-line message, and optionally a
// structured detail (e.g. an allocator's OOM report) that reporters can render as text or JSON.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <variant>

#include "memfit/core/json_fwd.h"  // declared only: every file includes this header

namespace memfit {

enum class ErrorCode {
  kInvalidArgument,     // bad input from a user or a file: CLI exit 2
  kNotFound,            // a file, key or device that is not there: CLI exit 2
  kIo,                  // a read/write that failed: CLI exit 2
  kResourceExhausted,   // out of memory (device or budget)
  kFailedPrecondition,  // the call is not valid in this state (double free, foreign pointer)
  kUnavailable,         // a platform feature is absent (no GPU, no NVML)
  kInternal,            // a bug in memfit
};

std::string_view error_code_name(ErrorCode code);

// Structured payload attached to an error (for example the OOM report of an allocator).
class ErrorDetail {
 public:
  virtual ~ErrorDetail() = default;
  virtual Json to_json() const = 0;
  virtual std::string to_text() const = 0;
};

class Error {
 public:
  Error(ErrorCode code, std::string message, std::shared_ptr<const ErrorDetail> detail = nullptr)
      : code_(code), message_(std::move(message)), detail_(std::move(detail)) {}

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const ErrorDetail* detail() const { return detail_.get(); }

  // Prefix the message with where it happened: "reading trace.csv: line 3: ...".
  Error with_context(std::string_view context) const;

 private:
  ErrorCode code_;
  std::string message_;
  std::shared_ptr<const ErrorDetail> detail_;
};

// Convenience constructors.
Error invalid_argument(std::string message);
Error not_found(std::string message);
Error io_error(std::string message);
Error resource_exhausted(std::string message, std::shared_ptr<const ErrorDetail> detail = nullptr);
Error failed_precondition(std::string message);
Error unavailable(std::string message);
Error internal_error(std::string message);

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit by design
  Expected(Error error) : state_(std::in_place_index<1>, std::move(error)) {}  // NOLINT

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : error_(std::make_shared<Error>(std::move(error))) {}  // NOLINT

  bool ok() const { return error_ == nullptr; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *error_; }

 private:
  std::shared_ptr<Error> error_;
};

using Status = Expected<void>;

inline Status ok_status() { return {}; }

}  // namespace memfit

// Propagate an error from an expression returning Status or Expected<T>.
#define MEMFIT_RETURN_IF_ERROR(expr)                         \
  do {                                                       \
    auto memfit_status_ = (expr);                            \
    if (!memfit_status_.ok()) return memfit_status_.error(); \
  } while (0)

#define MEMFIT_CONCAT_INNER_(a, b) a##b
#define MEMFIT_CONCAT_(a, b) MEMFIT_CONCAT_INNER_(a, b)
// `MEMFIT_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define MEMFIT_ASSIGN_OR_RETURN(lhs, expr) \
  MEMFIT_ASSIGN_OR_RETURN_IMPL_(MEMFIT_CONCAT_(memfit_expected_, __LINE__), lhs, expr)
#define MEMFIT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.error();                  \
  lhs = std::move(tmp).value()
