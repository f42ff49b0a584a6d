// Per-worker upstream keep-alive pools (see connection_pool.h).
#include "proxy/net/connection_pool.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <cerrno>

namespace sandgate::proxy {

std::string poolKey(uint64_t generation, std::string_view task, std::string_view host,
                    uint16_t port, std::string_view credential) {
  // Every text part is preceded by its length: no two different keys can spell the same.
  return fmt::format("{}|{}|{}:{}{}:{}{}:{}", generation, port, task.size(), task, host.size(),
                     host, credential.size(), credential);
}

bool socketIsQuiet(int fd) {
  if (fd < 0) return false;
  char c;
  ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace sandgate::proxy
