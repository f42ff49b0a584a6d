"""A loopback TCP relay that delays what the server sends back by a fixed time: a slow Redis
(or any slow server) for tests that show who waits on it. Bytes towards the server go at once;
bytes back are held `delay` seconds from when they arrived, in order. One thread pair per
connection, all daemons; close() ends the listener and every connection (bounded: it relays
only what the test's own client sends).
"""

import collections
import socket
import threading
import time


class SlowRelay:
    def __init__(self, target_port, delay, host="127.0.0.1"):
        self.target = (host, target_port)
        self.delay = delay
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self.conns += [client, server]
            threading.Thread(target=self._forward, args=(client, server), daemon=True).start()
            self._back(server, client)

    def _forward(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _back(self, server, client):
        """Server to client, each chunk sent `delay` after it came."""
        held = collections.deque()  # (when to send, bytes), in arrival order
        cv = threading.Condition()
        done = [False]

        def reader():
            try:
                while True:
                    data = server.recv(65536)
                    if not data:
                        break
                    with cv:
                        held.append((time.monotonic() + self.delay, data))
                        cv.notify()
            except OSError:
                pass
            with cv:
                done[0] = True
                cv.notify()

        def writer():
            while True:
                with cv:
                    while not held and not done[0]:
                        cv.wait(1)
                    if not held and done[0]:
                        break
                    at, data = held[0]
                    wait = at - time.monotonic()
                    if wait > 0:
                        cv.wait(wait)
                        continue
                    held.popleft()
                try:
                    client.sendall(data)
                except OSError:
                    break
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        threading.Thread(target=reader, daemon=True).start()
        threading.Thread(target=writer, daemon=True).start()

    def close(self):
        self.closed = True
        for s in [self.sock] + self.conns:
            try:
                s.close()
            except OSError:
                pass
