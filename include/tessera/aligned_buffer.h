// Owned, 64-byte-aligned, zero-initialized storage. Allocation happens at construction or
// Resize() only, never inside a kernel.
#pragma once

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "tessera/check.h"

namespace tessera {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kHugePage = size_t{2} << 20;
  // From this size on, memory comes straight from the kernel (mmap): its pages are zero without
  // being touched, so a large buffer costs resident memory only where it is written (a KV cache
  // sized for a long context holding a short prompt).
  static constexpr size_t kMapThreshold = size_t{1} << 20;

  // How the pages are backed. kHuge (for the KV cache, which decode attention streams from DRAM)
  // aligns the buffer to 2 MiB and asks the kernel for transparent huge pages over its whole
  // 2 MiB blocks (a hint; the tail and buffers under 2 MiB stay on small pages, so no memory is
  // added): with 4 KiB pages the TLB walks stall decode's dot products (bench/results/attention.md).
  enum class Pages { kSmall, kHuge };

  // Allocation failure throws std::bad_alloc (never aborts): the factories of the public API
  // (KvCache::Create, Session::Create, LoadedModel::Load, Attention) turn it into a
  // ResourceExhausted Status, and Python into MemoryError.
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, Pages pages = Pages::kSmall) : pages_(pages) { Resize(bytes); }
  // The one exception to zeroing: contents unspecified and pages not yet touched, for a caller that
  // writes every byte itself, spread over threads (first touch of fresh memory is the cost of a
  // large buffer).
  static AlignedBuffer Untouched(size_t bytes, Pages pages = Pages::kSmall) {
    AlignedBuffer b;
    b.pages_ = pages;
    b.Allocate(bytes);
    return b;
  }
  ~AlignedBuffer() { Release(); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        map_base_(std::exchange(o.map_base_, nullptr)),
        map_bytes_(std::exchange(o.map_bytes_, 0)),
        pages_(o.pages_) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(map_base_, o.map_base_);
    std::swap(map_bytes_, o.map_bytes_);
    std::swap(pages_, o.pages_);
    return *this;
  }

  // Grows to at least `bytes` (contents are not preserved); never shrinks.
  void Reserve(size_t bytes) {
    if (bytes > size_) Resize(bytes);
  }
  void Resize(size_t bytes) {
    Allocate(bytes);
    if (data_ && !map_base_) std::memset(data_, 0, size_);  // mapped pages are zero already
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
    Release();
    if (bytes > SIZE_MAX - kHugePage) throw std::bad_alloc();
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    if (rounded == 0) return;
    const size_t huge_bytes = pages_ == Pages::kHuge ? rounded / kHugePage * kHugePage : 0;
#if defined(__linux__)
    if (rounded >= kMapThreshold) {
      // Over-map by one huge page when aligning to it; the slack stays unused and untouched.
      const size_t align = huge_bytes ? kHugePage : 0;
      void* base = mmap(nullptr, rounded + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      map_base_ = base;
      map_bytes_ = rounded + align;
      const uintptr_t p = reinterpret_cast<uintptr_t>(base);
      data_ = reinterpret_cast<void*>(align ? (p + align - 1) / align * align : p);
#if defined(MADV_HUGEPAGE)
      if (huge_bytes) madvise(data_, huge_bytes, MADV_HUGEPAGE);  // before the first touch
#endif
      size_ = rounded;
      return;
    }
#endif
    // (aligned_alloc wants the size to be a multiple of the alignment.)
    data_ = huge_bytes == 0 ? std::aligned_alloc(kAlignment, rounded)
                            : std::aligned_alloc(kHugePage, (rounded + kHugePage - 1) / kHugePage * kHugePage);
    if (data_ == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge_bytes) madvise(data_, huge_bytes, MADV_HUGEPAGE);  // before the first touch
#endif
    size_ = rounded;
  }
  void Release() {
#if defined(__linux__)
    if (map_base_) munmap(map_base_, map_bytes_);
    else
#endif
      std::free(data_);
    data_ = map_base_ = nullptr;
    size_ = map_bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t size_ = 0;
  void* map_base_ = nullptr;  // set when the buffer is an mmap of map_bytes_
  size_t map_bytes_ = 0;
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
