// AlignedBuffer and Arena: alignment, zero fill, growth, slicing and overflow.
#include "core/aligned_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>

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
