// How much memory this process may still use, for planning allocations before making them.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

struct MemoryBudget {
  uint64_t bytes = UINT64_MAX;  // UINT64_MAX: nothing could be read (no limit known)
  std::string source;           // which limit is the smallest, e.g. "MemAvailable in /proc/meminfo"
};

// The smallest of: the kernel's estimate of memory available without swapping (MemAvailable),
// the room left under this process's cgroup memory limit, and the address space left under
// RLIMIT_AS (ulimit -v). Reads /proc and /sys; never allocates much, never throws.
MemoryBudget AvailableMemory();

// "1.5 GiB", "640.0 MiB", "12 KiB": for messages.
std::string FormatBytes(uint64_t bytes);

}  // namespace tessera
