#include "platform/memory_info.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace tessera {
namespace {

// A "Key:   123 kB" line of a /proc file, in bytes; 0 when absent.
uint64_t ProcKb(const char* path, const char* key) {
  std::ifstream f(path);
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(f, line)) {
    if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':') {
      unsigned long long kb = 0;
      if (std::sscanf(line.c_str() + n + 1, "%llu", &kb) == 1) return static_cast<uint64_t>(kb) * 1024;
    }
  }
  return 0;
}

// A number in a one-line /sys file; false for "max", absence or garbage.
bool ReadNumber(const std::string& path, uint64_t* out) {
  std::ifstream f(path);
  unsigned long long v = 0;
  if (!(f >> v)) return false;
  *out = v;
  return true;
}

// This process's cgroup v2 directory ("0::/path" in /proc/self/cgroup).
std::string CgroupDir() {
  std::ifstream f("/proc/self/cgroup");
  std::string line;
  while (std::getline(f, line))
    if (line.compare(0, 3, "0::") == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

void TakeSmaller(MemoryBudget* b, uint64_t bytes, const char* source) {
  if (bytes < b->bytes) {
    b->bytes = bytes;
    b->source = source;
  }
}

}  // namespace

MemoryBudget AvailableMemory() {
  MemoryBudget b;
  if (const uint64_t avail = ProcKb("/proc/meminfo", "MemAvailable"))
    TakeSmaller(&b, avail, "MemAvailable in /proc/meminfo");
  const std::string cg = CgroupDir();
  uint64_t limit = 0, used = 0;
  if (!cg.empty() && ReadNumber(cg + "/memory.max", &limit) && ReadNumber(cg + "/memory.current", &used))
    TakeSmaller(&b, limit > used ? limit - used : 0, "the cgroup limit memory.max");
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t mapped = ProcKb("/proc/self/status", "VmSize");
    const uint64_t cap = static_cast<uint64_t>(rl.rlim_cur);
    TakeSmaller(&b, cap > mapped ? cap - mapped : 0, "the address-space limit RLIMIT_AS (ulimit -v)");
  }
  return b;
}

std::string FormatBytes(uint64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", b / (1 << 30));
  else if (bytes >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%llu KiB", static_cast<unsigned long long>((bytes + 1023) / 1024));
  return buf;
}

}  // namespace tessera
