// Running out of memory is an error, never an abort: allocations that cannot be had throw
// std::bad_alloc inside the library and leave the public API as ResourceExhausted; sessions
// that cannot fit the machine are refused before anything is allocated.
#include <gtest/gtest.h>

#include <cstdint>
#include <new>

#include "runtime/session.h"
#include "runtime/session_plan.h"
#include "tessera/aligned_buffer.h"
#include "tessera/kv/kv_cache.h"
#include "tiny_model.h"

namespace tessera {
namespace {

TEST(OutOfMemory, ImpossibleBufferThrowsBadAlloc) {
  EXPECT_THROW(AlignedBuffer(size_t{1} << 62), std::bad_alloc);
  EXPECT_THROW(AlignedBuffer::Untouched(SIZE_MAX - 10, AlignedBuffer::Pages::kHuge), std::bad_alloc);
  AlignedBuffer b;
  EXPECT_THROW(b.Resize(size_t{1} << 62), std::bad_alloc);
  EXPECT_EQ(b.size(), 0u);  // left empty, still usable
  b.Resize(100);
  EXPECT_EQ(b.size(), 128u);
}

TEST(OutOfMemory, LargeBuffersAreZeroAndMapped) {
  AlignedBuffer b(AlignedBuffer::kMapThreshold * 3 + 5, AlignedBuffer::Pages::kHuge);
  const auto* bytes = b.as<unsigned char>();
  for (size_t i = 0; i < b.size(); i += 4093) ASSERT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % AlignedBuffer::kHugePage, 0u);
  AlignedBuffer moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.size() % AlignedBuffer::kAlignment, 0u);
}

TEST(OutOfMemory, KvCacheTooLargeForTheAddressSpaceIsAnError) {
  kv::KvCacheConfig c;
  c.layers = {{kv::LayerKind::kFull, 1024, 512, 512, 0}};
  c.batch = 1 << 14;
  c.max_context = 1 << 20;  // 2^14 * 1024 * 2^20 * 512 * 2 bytes * 2: more than any address space
  c.max_chunk = 16;
  StatusOr<std::unique_ptr<kv::KvCache>> cache = kv::KvCache::Create(c);
  ASSERT_FALSE(cache.ok());
  EXPECT_NE(cache.status().message().find("KvCache"), std::string::npos) << cache.status().message();
}

TEST(OutOfMemory, SessionLargerThanTheMachineIsRefusedWithTheNumbers) {
  auto m = testing::MakeTinyModel({});
  runtime::SessionOptions o;
  o.max_batch = 1 << 16;
  o.max_context = 1 << 30;
  o.max_chunk = 16;
  StatusOr<std::unique_ptr<runtime::Session>> s = runtime::Session::Create(*m, o, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kResourceExhausted);
  const std::string& msg = s.status().message();
  for (const char* want : {"max_batch 65536", "max_context 1073741824", "KV cache", "GiB", "can use"})
    EXPECT_NE(msg.find(want), std::string::npos) << want << " missing from: " << msg;
}

TEST(OutOfMemory, PlanCountsWhatTheSessionAllocates) {
  auto m = testing::MakeTinyModel({});
  runtime::SessionOptions o;
  o.max_context = 100;
  o.max_chunk = 8;
  StatusOr<runtime::SessionMemoryPlan> plan = runtime::PlanSession(*m, o, 1);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto s = runtime::Session::Create(*m, o, nullptr);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(plan.value().kv_bytes, s.value()->cache().bytes());
  EXPECT_EQ(plan.value().activation_bytes, s.value()->activation_bytes());
}

}  // namespace
}  // namespace tessera
