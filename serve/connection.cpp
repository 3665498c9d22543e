#include "serve/connection.h"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>

namespace zoo {
namespace {

// The numeric address and port of one end of a socket, as httplib formats them (getnameinfo).
bool socket_end(int socket, bool peer, std::string& address, int& port) {
  sockaddr_storage storage{};
  socklen_t length = sizeof storage;
  auto* any = reinterpret_cast<sockaddr*>(&storage);
  if ((peer ? getpeername(socket, any, &length) : getsockname(socket, any, &length)) != 0) return false;
  if (storage.ss_family != AF_INET && storage.ss_family != AF_INET6) return false;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(any, length, host, sizeof host, service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  address = host;
  port = std::atoi(service);
  return true;
}

// The first of this process's descriptors for which `matches(descriptor)` holds, or -1.
template <typename Matches>
int find_descriptor(const Matches& matches) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", error)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const int descriptor = std::stoi(name);
    if (matches(descriptor)) return descriptor;
  }
  return -1;
}

}  // namespace

int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port) {
  return find_descriptor([&](int socket) {
    std::string address;
    int port = -1;
    if (!socket_end(socket, true, address, port) || port != remote_port || address != remote_addr) return false;
    return socket_end(socket, false, address, port) && port == local_port && address == local_addr;
  });
}

bool widen_listen_backlog(int port, int backlog) {
  const int listener = find_descriptor([&](int socket) {
    int listening = 0;
    socklen_t length = sizeof listening;
    if (getsockopt(socket, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) != 0 || listening == 0) return false;
    std::string address;
    int local_port = -1;
    return socket_end(socket, false, address, local_port) && local_port == port;
  });
  return listener >= 0 && listen(listener, backlog) == 0;
}

bool peer_closed(int socket) {
  char byte;
  const ssize_t got = recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (got > 0) return false;
  if (got == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace zoo
