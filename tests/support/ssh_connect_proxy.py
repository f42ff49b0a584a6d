"""A ProxyCommand for ssh in tests: opens a CONNECT to HOST PORT through sandgate's proxy
listener on loopback with the task's Proxy-Authorization, then relays stdin/stdout to it.
Usage: ssh -o ProxyCommand='python3 ssh_connect_proxy.py %h %p' with SG_PROXY_PORT and
SG_PROXY_AUTH (task:token) in the environment. Exits 1 when the CONNECT is refused, printing
the status line and sandgate's reason on stderr.
"""
import base64
import os
import socket
import sys
import threading


def main():
    host, port = sys.argv[1], sys.argv[2]
    auth = base64.b64encode(os.environ["SG_PROXY_AUTH"].encode()).decode()
    s = socket.create_connection(("127.0.0.1", int(os.environ["SG_PROXY_PORT"])), timeout=30)
    s.sendall((f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Proxy-Authorization: Basic {auth}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)  # byte by byte: nothing after the head may be swallowed here
        if not chunk or len(head) > 65536:
            sys.stderr.write("proxy closed before answering\n")
            return 1
        head += chunk
    status = head.split(b"\r\n", 1)[0]
    if b" 200 " not in status + b" ":
        reason = [l for l in head.split(b"\r\n") if l.lower().startswith(b"x-sandgate-reason")]
        sys.stderr.write((status + b" " + b" ".join(reason)).decode(errors="replace") + "\n")
        return 1
    s.settimeout(None)

    def up():
        while True:
            data = os.read(0, 65536)
            if not data:
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            s.sendall(data)

    threading.Thread(target=up, daemon=True).start()
    while True:
        data = s.recv(65536)
        if not data:
            return 0
        os.write(1, data)


if __name__ == "__main__":
    sys.exit(main())
