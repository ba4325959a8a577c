// Command-line checks shared by the benchmark programs: --help prints the usage and exits before
// any measurement starts (a run takes minutes), and an option left without its value is an error
// rather than silently dropped by the programs' "--name value" pair loops.
#pragma once

#include <cstdio>
#include <cstring>

namespace tessera::bench {

// -1 to go on; otherwise the status main returns. `usage` follows "usage: PROGRAM".
inline int CheckArgs(int argc, char** argv, const char* usage) {
  const char* slash = std::strrchr(argv[0], '/');
  const char* program = slash ? slash + 1 : argv[0];
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s%s", program, usage);
      return 0;
    }
  if ((argc - 1) % 2 != 0) {
    std::fprintf(stderr, "%s: option %s needs a value (see --help)\n", program, argv[argc - 1]);
    return 2;
  }
  return -1;
}

}  // namespace tessera::bench
