#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tessera::io {
namespace {

std::string KindOfMode(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "is a character device";
  if (S_ISBLK(mode)) return "is a block device";
  if (S_ISSOCK(mode)) return "is a socket";
  return "is not a regular file";
}

// The predicate for a failed stat()/open() of `path` with errno `err`.
std::string KindOfError(const std::string& path, int err) {
  if (err == ELOOP) return "is a symbolic link loop (too many levels of symbolic links)";
  if (err == ENOENT) {
    struct stat lst {};
    if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) return "is a dangling symbolic link";
    return "does not exist";
  }
  if (err == ENOTDIR) return "does not exist (a component of the path is not a directory)";
  return std::string("cannot be accessed: ") + std::strerror(err);
}

std::string Prefix(std::string_view what, const std::string& path) {
  return std::string(what) + " '" + path + "' ";
}

// "cannot open config 'x': it is a FIFO (named pipe), not a regular file" / "...: it does not exist".
Status CannotOpen(std::string_view what, const std::string& path, const std::string& kind) {
  const bool exists = kind.rfind("is ", 0) == 0;
  return InvalidArgument("cannot open " + std::string(what) + " '" + path + "': it " + kind +
                         (exists ? ", not a regular file" : ""));
}

}  // namespace

std::string DescribeNonRegular(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return KindOfError(path, errno);
  return KindOfMode(st.st_mode);
}

StatusOr<int> OpenInputFile(const std::string& path, std::string_view what) {
  if (path.empty()) return InvalidArgument(std::string(what) + " path is empty");
  const std::string kind = DescribeNonRegular(path);
  if (!kind.empty()) return CannotOpen(what, path, kind);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return CannotOpen(what, path, KindOfError(path, errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {  // replaced between the stat and the open
    const std::string now = ::fstat(fd, &st) != 0 ? "cannot be examined" : KindOfMode(st.st_mode);
    ::close(fd);
    return CannotOpen(what, path, now);
  }
  // Regular files never block; clear the flag so later reads behave as ordinary ones.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

StatusOr<std::string> ReadInputFile(const std::string& path, std::string_view what, uint64_t max_bytes) {
  StatusOr<int> opened = OpenInputFile(path, what);
  if (!opened.ok()) return opened.status();
  const int fd = opened.value();
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size < 0) {
    ::close(fd);
    return InvalidArgument(Prefix(what, path) + "cannot be examined");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    return InvalidArgument(Prefix(what, path) + "has " + std::to_string(size) + " bytes, more than the limit of " +
                           std::to_string(max_bytes));
  }
  std::string text(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n < 0 ? std::strerror(errno) : "the file shrank while being read";
      ::close(fd);
      return InvalidArgument(Prefix(what, path) + "could not be read: " + why);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

}  // namespace tessera::io
