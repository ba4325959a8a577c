// CHECK: internal invariants only. A failed CHECK is a bug in Tessera, never a user error
// (user errors return Status), so it aborts with the location and message.
#pragma once

namespace tessera::detail {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const char* msg);
}  // namespace tessera::detail

#define TESSERA_CHECK(cond, msg)                                          \
  do {                                                                    \
    if (!(cond)) ::tessera::detail::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
