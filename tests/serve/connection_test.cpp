#include "serve/connection.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
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

}  // namespace
}  // namespace zoo
