// Owned, 64-byte-aligned, zero-initialized storage. Allocation happens at construction or
// Resize() only, never inside a kernel.
#pragma once

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "tessera/check.h"

namespace tessera {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;

  // How the pages are backed. kHuge (for the KV cache, which decode attention streams from DRAM)
  // aligns the buffer to 2 MiB and asks the kernel for transparent huge pages over its whole
  // 2 MiB blocks (a hint; the tail and buffers under 2 MiB stay on small pages, so no memory is
  // added). 16q/1kv x 512 bf16 decode at 32k keys: 19.6 -> 21.9 GB/s, medians of six alternations
  // (2026-11-30, bench/BENCHMARKS.md): with 4 KiB pages the TLB walks stall the dot products.
  enum class Pages { kSmall, kHuge };

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, Pages pages = Pages::kSmall) : pages_(pages) { Resize(bytes); }
  // The one exception to zeroing: contents unspecified and pages not yet touched, for a caller that
  // writes every byte itself, spread over threads (first touch of fresh memory is the cost of a
  // large buffer: 0.8-0.9 GB/s from one thread in this VM, 2.6-3.4 from two).
  static AlignedBuffer Untouched(size_t bytes, Pages pages = Pages::kSmall) {
    AlignedBuffer b;
    b.pages_ = pages;
    b.Allocate(bytes);
    return b;
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), pages_(o.pages_) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(pages_, o.pages_);
    return *this;
  }

  // Grows to at least `bytes` (contents are not preserved); never shrinks.
  void Reserve(size_t bytes) {
    if (bytes > size_) Resize(bytes);
  }
  void Resize(size_t bytes) {
    Allocate(bytes);
    if (data_) std::memset(data_, 0, size_);
  }

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() { return static_cast<T*>(data_); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data_); }

 private:
  void Allocate(size_t bytes) {
    std::free(data_);
    size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    const size_t huge_bytes = pages_ == Pages::kHuge ? rounded / kHugePage * kHugePage : 0;
    // (aligned_alloc wants the size to be a multiple of the alignment.)
    data_ = rounded == 0       ? nullptr
            : huge_bytes == 0 ? std::aligned_alloc(kAlignment, rounded)
                              : std::aligned_alloc(kHugePage, (rounded + kHugePage - 1) / kHugePage * kHugePage);
    TESSERA_CHECK(rounded == 0 || data_ != nullptr, "out of memory");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge_bytes) madvise(data_, huge_bytes, MADV_HUGEPAGE);  // before the first touch
#endif
    size_ = rounded;
  }

  void* data_ = nullptr;
  size_t size_ = 0;
  Pages pages_ = Pages::kSmall;
};

// Bump allocator over one AlignedBuffer: a kernel call takes its scratch from here and the
// caller resets it between calls. Sizing happens at plan time (Reserve), not inside kernels.
class Arena {
 public:
  void Reserve(size_t bytes) { buffer_.Reserve(bytes); }
  void Reset() { used_ = 0; }
  size_t capacity() const { return buffer_.size(); }

  template <typename T>
  T* Take(size_t count) {
    size_t bytes = (count * sizeof(T) + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment *
                   AlignedBuffer::kAlignment;
    TESSERA_CHECK(used_ + bytes <= buffer_.size(), "arena overflow: plan reserved too little scratch");
    T* p = reinterpret_cast<T*>(static_cast<char*>(buffer_.data()) + used_);
    used_ += bytes;
    return p;
  }
  // Bytes Take<T>(count) will consume, for planning.
  template <typename T>
  static size_t Bytes(size_t count) {
    return (count * sizeof(T) + AlignedBuffer::kAlignment - 1) / AlignedBuffer::kAlignment *
           AlignedBuffer::kAlignment;
  }

 private:
  AlignedBuffer buffer_;
  size_t used_ = 0;
};

}  // namespace tessera
