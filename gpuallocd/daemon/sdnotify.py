"""systemd's readiness protocol (sd_notify), for `Type=notify` services."""

from __future__ import annotations

import os
import socket

__all__ = ["notify_ready", "notify_stopping"]


def _notify(message: str) -> None:
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())


def notify_ready() -> None:
    _notify("READY=1")


def notify_stopping() -> None:
    _notify("STOPPING=1")
