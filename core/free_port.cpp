#include "core/free_port.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace trident {

HeldPort& HeldPort::operator=(HeldPort&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

void HeldPort::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

// The IPv4 port a socket is bound to.
int listening_port_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error(std::string("cannot read back the socket's port: ") + std::strerror(errno));
  if (addr.sin_family != AF_INET) throw std::runtime_error("it is not an IPv4 socket");
  return ntohs(addr.sin_port);
}

// A close-on-exec TCP socket bound to a port the kernel chose, on all interfaces.
HeldPort bind_port_zero() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot create a socket to pick a port: ") + std::strerror(errno));
  HeldPort held(fd, 0);  // closes the socket should anything below throw
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;  // the kernel picks a free ephemeral port
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error(std::string("cannot bind a socket to port 0: ") + std::strerror(errno));
  const int port = listening_port_of(fd);
  return HeldPort(held.release(), port);
}

}  // namespace

int pick_free_port() { return bind_port_zero().port(); }

HeldPort hold_free_port() {
  HeldPort held = bind_port_zero();
  if (::listen(held.fd(), SOMAXCONN) != 0)
    throw std::runtime_error(std::string("cannot listen on the picked port: ") + std::strerror(errno));
  return held;
}

int listening_port(int fd) {
  if (::fcntl(fd, F_GETFD) < 0) throw std::runtime_error("it is not an open file descriptor");
  int type = 0, accepting = 0;
  socklen_t len = sizeof type;
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM)
    throw std::runtime_error("it is not a TCP socket");
  len = sizeof accepting;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &len) != 0 || !accepting)
    throw std::runtime_error("the socket is not listening");
  return listening_port_of(fd);
}

}  // namespace trident
