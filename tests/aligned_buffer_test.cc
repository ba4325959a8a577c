// AlignedBuffer and Arena: alignment, zero fill, growth, slicing and overflow.
#include "tessera/aligned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera {
namespace {

bool IsAligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

bool AllZero(const AlignedBuffer& b) {
  const auto* p = b.as<unsigned char>();
  for (size_t i = 0; i < b.size(); ++i)
    if (p[i] != 0) return false;
  return true;
}

TEST(AlignedBufferTest, Is64ByteAlignedZeroedAndRounded) {
  AlignedBuffer b(100);
  EXPECT_TRUE(IsAligned(b.data(), AlignedBuffer::kAlignment));
  EXPECT_EQ(b.size(), 128u);
  EXPECT_TRUE(AllZero(b));
  b.as<unsigned char>()[5] = 7;
  b.Reserve(50);  // never shrinks, keeps contents
  EXPECT_EQ(b.size(), 128u);
  EXPECT_EQ(b.as<unsigned char>()[5], 7);
  b.Reserve(1000);  // grows, zeroed again
  EXPECT_EQ(b.size(), 1024u);
  EXPECT_TRUE(AllZero(b));
  AlignedBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
}

#if defined(__linux__)
// The VmFlags line of the /proc/self/smaps entry that maps `p`, or "" if none was found.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}
#endif

TEST(AlignedBufferTest, HugePagedBufferIsAlignedZeroedAndKeepsItsSize) {
  const size_t bytes = 5 * AlignedBuffer::kHugePage + 100;
  AlignedBuffer b(bytes, AlignedBuffer::Pages::kHuge);
  EXPECT_TRUE(IsAligned(b.data(), AlignedBuffer::kHugePage));
  EXPECT_EQ(b.size(), 5 * AlignedBuffer::kHugePage + 128);  // no rounding up to huge pages
  EXPECT_TRUE(AllZero(b));
  b.as<unsigned char>()[b.size() - 1] = 1;  // the tail is ours (ASan would object otherwise)
#if defined(__linux__)
  // The whole 2 MiB blocks carry the huge-page hint (the "hg" VmFlag), where the kernel has THP.
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.good()) {
    EXPECT_NE(VmFlagsOf(b.data()).find(" hg"), std::string::npos) << VmFlagsOf(b.data());
  }
#endif
  b.Reserve(7 * AlignedBuffer::kHugePage);  // regrows with the same paging
  EXPECT_TRUE(IsAligned(b.data(), AlignedBuffer::kHugePage));
  EXPECT_TRUE(AllZero(b));
  AlignedBuffer moved(std::move(b));
  moved.Resize(3 * AlignedBuffer::kHugePage);
  EXPECT_TRUE(IsAligned(moved.data(), AlignedBuffer::kHugePage));
  // Under 2 MiB there is no whole huge page to ask for: plain 64-byte alignment, no padding.
  AlignedBuffer small(1000, AlignedBuffer::Pages::kHuge);
  EXPECT_TRUE(IsAligned(small.data(), AlignedBuffer::kAlignment));
  EXPECT_EQ(small.size(), 1024u);
  EXPECT_TRUE(AllZero(small));
}

// Untouched: the same allocation and hint without the zeroing (the caller writes every byte).
TEST(AlignedBufferTest, UntouchedBufferIsAllocatedButNotWritten) {
  const size_t bytes = 4 * AlignedBuffer::kHugePage + 10;
  AlignedBuffer b = AlignedBuffer::Untouched(bytes, AlignedBuffer::Pages::kHuge);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_TRUE(IsAligned(b.data(), AlignedBuffer::kHugePage));
  EXPECT_EQ(b.size(), 4 * AlignedBuffer::kHugePage + 64);
#if defined(__linux__)
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.good()) {
    EXPECT_NE(VmFlagsOf(b.data()).find(" hg"), std::string::npos) << VmFlagsOf(b.data());
  }
#endif
  std::memset(b.data(), 0x5a, b.size());  // all of it is ours (ASan would object otherwise)
  EXPECT_EQ(b.as<unsigned char>()[b.size() - 1], 0x5a);
  AlignedBuffer small = AlignedBuffer::Untouched(100);
  EXPECT_TRUE(IsAligned(small.data(), AlignedBuffer::kAlignment));
  EXPECT_EQ(small.size(), 128u);
  EXPECT_EQ(AlignedBuffer::Untouched(0).data(), nullptr);
}

TEST(ArenaTest, TakesAlignedSlicesAndRefusesOverflow) {
  Arena a;
  a.Reserve(256);
  float* f = a.Take<float>(3);  // 12 bytes -> one 64-byte slice
  char* c = a.Take<char>(64);
  EXPECT_TRUE(IsAligned(f, AlignedBuffer::kAlignment));
  EXPECT_EQ(c - reinterpret_cast<char*>(f), 64);
  EXPECT_EQ(Arena::Bytes<float>(3), 64u);
  EXPECT_DEATH(a.Take<char>(200), "arena overflow");
  a.Reset();
  EXPECT_EQ(a.Take<char>(256), reinterpret_cast<char*>(f));
}

}  // namespace
}  // namespace tessera
