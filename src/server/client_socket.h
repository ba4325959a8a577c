// The connection a request arrived on, for a handler that waits long before it answers (a
// non-streaming completion): cpp-httplib hands handlers the peer's address and port but not the
// socket, so the socket is found among the process's descriptors by its two ends. The connection's
// thread is the handler's, so the descriptor stays this connection's while the handler runs.
#pragma once

#include <string>

namespace tessera::server {

class ClientSocket {
 public:
  // The socket whose local port is `local_port` and whose peer is remote_addr:remote_port (as
  // httplib writes them: a numeric host). Not found (or httplib gave no port): Connected() is true.
  static ClientSocket Find(const std::string& remote_addr, int remote_port, int local_port);

  // False once the peer closed or reset the connection; true while it holds it open, also with a
  // next request already sent (pipelined bytes are left unread).
  bool Connected() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace tessera::server
