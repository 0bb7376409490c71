// A free TCP port (pure POSIX), for whatever must hand a rendezvous port to
// ranks it starts: the launcher's --master-port 0, `trident plan profile`'s
// pipelined run.
#pragma once

namespace trident {

// Binds a TCP socket to port 0 and returns the port the kernel chose. The port
// is free now; another process could still take it before rank 0 binds it.
// Throws std::runtime_error naming the failed call and errno's text.
int pick_free_port();

// NOTE [held store port]
// A port picked and then closed can be taken by another process before rank
// 0's store binds it (seen under a loaded parallel ctest: "port ... is already
// in use"). So `trident launch --master-port 0` keeps the socket: it binds
// port 0 and listens, and rank 0 (alone) inherits the listening socket, named
// by TRIDENT_STORE_FD, and serves the store on it (c10d's
// TCPStoreOptions::masterListenFd). The port is never free between the pick
// and the store. The launcher closes its own copy once the ranks are started,
// so a store that died is refused at once rather than answered by a backlog.
class HeldPort {
 public:
  HeldPort() = default;
  HeldPort(int fd, int port) : fd_(fd), port_(port) {}
  HeldPort(const HeldPort&) = delete;
  HeldPort& operator=(const HeldPort&) = delete;
  HeldPort(HeldPort&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }
  HeldPort& operator=(HeldPort&& other) noexcept;
  ~HeldPort() { close(); }
  int fd() const { return fd_; }
  int port() const { return port_; }
  void close();
  // Gives up ownership: the caller closes the returned descriptor.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A close-on-exec TCP socket bound to a port the kernel chose (all
// interfaces) and listening on it. Throws std::runtime_error as pick_free_port.
HeldPort hold_free_port();

// The port `fd` listens on; throws std::runtime_error when `fd` is not an open
// listening TCP socket (for TRIDENT_STORE_FD's check).
int listening_port(int fd);

}  // namespace trident
