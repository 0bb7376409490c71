#include "core/free_port.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace trident {

int pick_free_port() {
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
    int get() const { return fd; }
  } sock{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (sock.get() < 0) throw std::runtime_error(std::string("cannot create a socket to pick a port: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;  // the kernel picks a free ephemeral port
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error(std::string("cannot bind a socket to port 0: ") + std::strerror(errno));
  socklen_t len = sizeof addr;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error(std::string("cannot read back the picked port: ") + std::strerror(errno));
  return ntohs(addr.sin_port);
}

}  // namespace trident
