#include "server/client_socket.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <filesystem>

namespace tessera::server {
namespace {

// The numeric host and the port of a socket address, as httplib formats its remote_addr.
bool HostAndPort(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool Matches(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string host;
  int port = -1;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !HostAndPort(a, len, &host, &port) ||
      port != local_port)
    return false;
  len = sizeof a;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !HostAndPort(a, len, &host, &port))
    return false;
  return port == remote_port && host == remote_addr;
}

}  // namespace

ClientSocket ClientSocket::Find(const std::string& remote_addr, int remote_port, int local_port) {
  ClientSocket s;
  if (remote_port < 0 || local_port < 0) return s;
  std::error_code ec;
  // Only the open descriptors are listed; sockets that are not TCP fail getsockname's match.
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == name.c_str() || *end != '\0') continue;
    if (Matches(static_cast<int>(fd), remote_addr, remote_port, local_port)) {
      s.fd_ = static_cast<int>(fd);
      break;
    }
  }
  return s;
}

bool ClientSocket::Connected() const {
  if (fd_ < 0) return true;
  pollfd p{fd_, POLLRDHUP, 0};
  if (poll(&p, 1, 0) < 0) return true;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

}  // namespace tessera::server
