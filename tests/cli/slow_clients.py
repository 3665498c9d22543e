"""Slow HTTP clients (slowloris) for zoo serve's checks: each opens a connection to the loopback
address, sends the start of a request's head, then one more header line every `interval` seconds,
and never finishes it. Used by serve.sh and scripts/serve_connections.sh.

    with SlowClients(port, 30) as slow:
        ...                      # the server is asked other things meanwhile
        assert not slow.answered()
"""
import select
import socket
import threading


class SlowClients:
    def __init__(self, port, count, interval=0.5):
        self.port, self.count, self.interval = port, count, interval
        self.sockets = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._trickle)

    def __enter__(self):
        for _ in range(self.count):
            s = socket.create_connection(("127.0.0.1", self.port))
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: test\r\n")
            self.sockets.append(s)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        for s in self.sockets:
            s.close()

    def answered(self):
        """How many were answered or closed by the server so far."""
        poller = select.poll()  # select() takes no descriptor past 1023
        for s in self.sockets:
            poller.register(s, select.POLLIN)
        return len(poller.poll(0))

    def _trickle(self):
        n = 0
        while not self._stop.wait(self.interval):
            n += 1
            for s in self.sockets:
                s.sendall(b"X-Slow-%d: 1\r\n" % n)
