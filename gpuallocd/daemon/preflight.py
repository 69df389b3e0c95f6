"""Every reason to refuse a start that can be known before anything is written.

Start-up writes: the state directory, its lock and ledger, the socket's directory
(`/run/gpuallocd`). A daemon refused after those were made leaves them behind for nothing, and
a warning logged just before the refusal reads as "starting anyway". So the refusals that need
no state come first, in this order: a feature that cannot work with what the daemon holds
(MissingPrivilege), an address of the metrics or the dashboard that is malformed or cannot be
bound (ConfigError, StateUnusable), the socket already served by another daemon
(AlreadyRunning); then the caller opens the GPU backend (HardwareUnavailable), and only then
logs the warnings and prepares the state.

An address is tried by binding it and closing it at once, as the server will bind it later
(SO_REUSEADDR, every address the name resolves to): a port another program holds is refused
here, with the same words the server would use.
"""

from __future__ import annotations

import socket
import stat
from pathlib import Path

from gpuallocd.api.server import refuse_if_served
from gpuallocd.api.tcp_site import unservable
from gpuallocd.daemon.needs import Host, Need, refuse_unmet
from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.dashboard.address import parse_dashboard_address
from gpuallocd.metrics.address import parse_listen_address

__all__ = ["preflight"]


def preflight(config: DaemonConfig, host: Host, activated: bool) -> list[Need]:
    """Raise the first refusal that needs no state; the needs (for the diagnostics)."""
    needs = refuse_unmet(config, host)
    if config.metrics_listen:
        _try_binding(*parse_listen_address(config.metrics_listen), "metrics")
    if config.dashboard_listen:
        _try_binding(*parse_dashboard_address(config.dashboard_listen), "the dashboard")
    socket_path = Path(config.socket)
    if not activated and _is_socket(socket_path):
        refuse_if_served(socket_path)
    return needs


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def _try_binding(host: str, port: int, what: str) -> None:
    """StateUnusable (naming `what`) where HOST:PORT cannot be bound now."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in found:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
    except OSError as exc:
        raise unservable(what, host, port, exc) from exc
