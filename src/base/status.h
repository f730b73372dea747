// Internal error handling: a [[nodiscard]] Status (code + message) and Result<T>, modelled on
// absl::Status / absl::StatusOr. src/ throws no exceptions; the C API turns a Status into an
// arfStatus_t and the thread-local last-error string.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "arfusion/arfusion.h"

namespace arf {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(arfStatus_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == arfSuccess; }
  arfStatus_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends context ("file:line: ") so a failure carries the path it travelled.
  Status with_context(const char* file, int line) const {
    if (is_ok()) return *this;
    return Status(code_, std::string(file) + ":" + std::to_string(line) + ": " + message_);
  }

 private:
  arfStatus_t code_ = arfSuccess;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return Status(arfInvalidArgument, std::move(m)); }
inline Status unsupported(std::string m) { return Status(arfUnsupported, std::move(m)); }
inline Status internal_error(std::string m) { return Status(arfInternal, std::move(m)); }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}           // NOLINT: implicit like StatusOr
  Result(Status status) : v_(std::move(status)) {}     // NOLINT
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return is_ok() ? kOk : std::get<Status>(v_);
  }
  T& value() { return std::get<T>(v_); }
  const T& value() const { return std::get<T>(v_); }
  T&& take() { return std::move(std::get<T>(v_)); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace arf

#define ARF_RETURN_IF_ERROR(expr)                                  \
  do {                                                             \
    ::arf::Status arf_status_ = (expr);                            \
    if (!arf_status_.is_ok()) return arf_status_.with_context(__FILE__, __LINE__); \
  } while (0)
