#include "serve/connection.h"

#include <gtest/gtest.h>

#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace zoo {
namespace {

int port_of(int socket, bool peer) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  auto* any = reinterpret_cast<sockaddr*>(&address);
  EXPECT_EQ(peer ? getpeername(socket, any, &length) : getsockname(socket, any, &length), 0);
  return ntohs(address.sin_port);
}

// A loopback connection: the server's end is found by the two ends' addresses, is open while the
// client is connected (also with a next request waiting on it), and reads as closed once the
// client has closed its end.
TEST(Connection, TheServersEndIsFoundAndSeenClosedWhenTheClientCloses) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  const int server_port = port_of(listener, false);
  const int client = socket(AF_INET, SOCK_STREAM, 0);
  address.sin_port = htons(static_cast<uint16_t>(server_port));
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  const int client_port = port_of(client, false);

  EXPECT_EQ(connection_socket("127.0.0.1", server_port, "127.0.0.1", client_port), accepted);
  // The client's own end has the ports the other way round; an unknown peer has no socket here.
  EXPECT_EQ(connection_socket("127.0.0.1", client_port, "127.0.0.1", server_port), client);
  EXPECT_EQ(connection_socket("127.0.0.1", server_port, "127.0.0.1", client_port == 1 ? 2 : 1), -1);
  EXPECT_EQ(connection_socket("10.0.0.1", server_port, "127.0.0.1", client_port), -1);

  EXPECT_FALSE(peer_closed(accepted));
  ASSERT_EQ(write(client, "GET", 3), 3);  // a next request waiting: still open
  EXPECT_FALSE(peer_closed(accepted));
  char bytes[3];
  EXPECT_EQ(read(accepted, bytes, 3), 3) << "the peek took a byte";
  close(client);
  bool closed = false;
  for (int i = 0; i < 100 && !closed; ++i) {  // the end of the stream crosses the loopback at once
    closed = peer_closed(accepted);
    if (!closed) usleep(1000);
  }
  EXPECT_TRUE(closed);
  EXPECT_TRUE(peer_closed(accepted));
  close(accepted);
  close(listener);
}

// A loopback socket listening with `backlog` and never accepting; its port.
int listening(int backlog, int& port) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(listen(listener, backlog), 0);
  port = port_of(listener, false);
  return listener;
}

// How many of `clients` connections to `port`, started together without waiting, are established
// within `wait_ms` (the kernel completes a loopback handshake at once, or drops the SYN of a
// connection its accept queue has no room for).
int connected_within(int port, int clients, int wait_ms) {
  std::vector<int> sockets;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  for (int i = 0; i < clients; ++i) {
    const int s = socket(AF_INET, SOCK_STREAM, 0);
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    connect(s, reinterpret_cast<sockaddr*>(&address), sizeof address);
    sockets.push_back(s);
  }
  usleep(static_cast<useconds_t>(wait_ms) * 1000);
  int connected = 0;
  for (const int s : sockets) {
    pollfd p{s, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof error;
    if (poll(&p, 1, 0) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) ++connected;
    close(s);
  }
  return connected;
}

// Widening a listening socket's backlog lets 32 clients that connect together in at once; at
// httplib's backlog of 5 (here 2) most of them wait for a retransmission of their SYN.
TEST(Connection, AWidenedBacklogTakesClientsThatConnectTogether) {
  int narrow_port = 0, wide_port = 0;
  const int narrow = listening(2, narrow_port), wide = listening(2, wide_port);
  EXPECT_LT(connected_within(narrow_port, 32, 200), 32) << "the kernel took them all at a backlog of 2";
  EXPECT_TRUE(widen_listen_backlog(wide_port, 64));
  EXPECT_EQ(connected_within(wide_port, 32, 200), 32);
  // A port this process does not listen on has nothing to widen (a connected socket's is not it).
  EXPECT_FALSE(widen_listen_backlog(narrow_port == 1 ? 2 : 1, 64));
  close(narrow);
  close(wide);
}

}  // namespace
}  // namespace zoo
