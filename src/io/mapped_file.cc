#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "io/input_file.h"

namespace tessera::io {

StatusOr<MappedFile> MappedFile::Open(const std::string& path) {
  StatusOr<int> opened = OpenInputFile(path, "file");  // regular files only, never blocks
  if (!opened.ok()) return Status(opened.status().code(), "MappedFile::Open: " + opened.status().message());
  const int fd = opened.value();
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return InvalidArgument("MappedFile::Open: cannot stat '" + path + "': " + std::strerror(err));
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return InvalidArgument("MappedFile::Open: cannot map '" + path + "' (" + std::to_string(file.size_) +
                             " bytes): " + std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping keeps the file referenced
  return file;
}

bool MappedFile::Prefault(const void* p, size_t bytes) {
#ifdef MADV_POPULATE_READ
  if (p == nullptr || bytes == 0) return false;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_READ) == 0;
#else
  (void)p, (void)bytes;
  return false;
#endif
}

bool MappedFile::Release(const void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return false;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);  // whole pages only:
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);       // neighbours keep theirs
  if (end <= begin) return false;
  return ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) == 0;
}

MappedFile::~MappedFile() { Reset(); }

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), path_(std::move(o.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    Reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    path_ = std::move(o.path_);
  }
  return *this;
}

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tessera::io
