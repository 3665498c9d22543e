#pragma once
// Whether the client of a request that is still being answered has gone away. cpp-httplib 0.11.4
// (Debian 12's) hands a handler no socket, and a request answered in one piece writes nothing
// until it is done, so a client that disconnects would keep its sequence decoding to the end.
// The connection's socket is found among the process's descriptors by its two ends (the
// addresses and ports httplib reports in the request), and a peek at it reads the end of the
// stream once the client has closed it: what later httplib releases do for
// `Request::is_connection_closed()`.

#include <string>

namespace zoo {

// The descriptor of the TCP connection local_addr:local_port <-> remote_addr:remote_port
// (numeric addresses, as httplib reports them), or -1 when this process has none.
int connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr, int remote_port);

// Raises the backlog of this process's listening TCP socket on `port` to `backlog` (listen() again
// on a listening socket changes only its backlog); false when it has none. Debian's httplib
// library listens with 5: 16 clients connecting at once overflow it, and the kernel drops the
// SYNs of the rest, whose clients try again a second later (TCP's first retransmission).
bool widen_listen_backlog(int port, int backlog);

// Whether the peer has closed `socket` (or it has failed): a peek that does not wait reads the end
// of the stream or an error. Bytes waiting (a next request on the connection) mean it is open.
bool peer_closed(int socket);

}  // namespace zoo
