#include "tessera/status.h"

#include <cstdio>
#include <cstdlib>

namespace tessera {

Status InvalidArgument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
Status OutOfRange(std::string message) { return Status(StatusCode::kOutOfRange, std::move(message)); }
Status Unimplemented(std::string message) {
  return Status(StatusCode::kUnimplemented, std::move(message));
}
Status ResourceExhausted(std::string message) {
  return Status(StatusCode::kResourceExhausted, std::move(message));
}

Status Cancelled(std::string message) { return Status(StatusCode::kCancelled, std::move(message)); }
Status NotFound(std::string message) { return Status(StatusCode::kNotFound, std::move(message)); }

namespace detail {
void CheckFailed(const char* file, int line, const char* cond, const char* msg) {
  std::fprintf(stderr, "tessera: CHECK failed at %s:%d: %s (%s)\n", file, line, cond, msg ? msg : "");
  std::abort();
}
}  // namespace detail

}  // namespace tessera
