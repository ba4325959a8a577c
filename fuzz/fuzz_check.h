// Shared by the libFuzzer targets: a failed invariant or an exception crossing a parser's API is a
// crash (abort), so libFuzzer saves the input and the run fails.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#define FUZZ_CHECK(cond, msg)                                                                  \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      std::fprintf(stderr, "%s:%d: invariant failed: %s (%s)\n", __FILE__, __LINE__, #cond, msg); \
      std::abort();                                                                            \
    }                                                                                          \
  } while (0)

namespace tessera::fuzz {

// TESSERA_FUZZ_TOLERATE_EXCEPTIONS=1 passes over an escaping exception instead of aborting: only to
// measure a parser whose exception leak is known and being fixed elsewhere. CI never sets it.
inline bool TolerateExceptions() {
  static const bool tolerate = [] {
    const char* v = std::getenv("TESSERA_FUZZ_TOLERATE_EXCEPTIONS");
    return v != nullptr && v[0] == '1';
  }();
  return tolerate;
}

// Runs `f`; an exception escaping it is fatal (see TolerateExceptions). Returns false when one did.
template <class F>
bool NoEscape(const char* api, F&& f) {
  try {
    std::forward<F>(f)();
    return true;
  } catch (const std::exception& e) {
    if (TolerateExceptions()) return false;
    std::fprintf(stderr, "%s: exception escaped: %s\n", api, e.what());
  } catch (...) {
    if (TolerateExceptions()) return false;
    std::fprintf(stderr, "%s: non-std exception escaped\n", api);
  }
  std::abort();
}

}  // namespace tessera::fuzz
