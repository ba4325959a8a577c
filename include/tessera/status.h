// Status / StatusOr: how bad input is reported across the public API (no exceptions cross it).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "tessera/check.h"

namespace tessera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kOutOfRange,
  kUnimplemented,
  kInternal,
  kResourceExhausted,
  kCancelled,
  kNotFound,  // an optional input is absent (a model without a chat template); the caller may fall back
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status OutOfRange(std::string message);
Status Unimplemented(std::string message);
// Memory, threads or another resource of the machine ran out (or would: a plan that cannot fit).
Status ResourceExhausted(std::string message);
// The caller asked to stop (a cancel flag); what was done so far stays valid.
Status Cancelled(std::string message);
// Something optional is not there (a model without a chat template); callers may fall back.
Status NotFound(std::string message);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    TESSERA_CHECK(!status_.ok(), "StatusOr built from an OK status without a value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    TESSERA_CHECK(ok(), status_.message().c_str());
    return *value_;
  }
  const T& value() const& {
    TESSERA_CHECK(ok(), status_.message().c_str());
    return *value_;
  }
  // From a temporary: the value moves out (`auto m = Model::Load(dir).value();`).
  T&& value() && {
    TESSERA_CHECK(ok(), status_.message().c_str());
    return std::move(*value_);
  }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace tessera

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define TESSERA_RETURN_IF_ERROR(expr)              \
  do {                                             \
    ::tessera::Status _tessera_status = (expr);    \
    if (!_tessera_status.ok()) return _tessera_status; \
  } while (0)
