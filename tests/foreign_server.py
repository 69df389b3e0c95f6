"""A stand-in server run as another user: `foreign_server.py SOCKET UID GID` (started as root).

It gives up root for UID and GID, listens on SOCKET, and for each connection prints (as a JSON
line) how many bytes it received and its request line; a complete request gets a JSON answer
naming the server's uid, then the connection is closed.
"""

from __future__ import annotations

import json
import os
import socket
import sys


def serve_one(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    if b"\r\n\r\n" in data:
        body = json.dumps({"served_by_uid": os.getuid()}).encode()
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
    line = data.split(b"\r\n", 1)[0].decode("latin-1")
    print(json.dumps({"received": len(data), "request_line": line}), flush=True)


def main() -> None:
    path, uid, gid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(8)
    print("listening", flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            serve_one(conn)


if __name__ == "__main__":
    main()
