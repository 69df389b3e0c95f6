"""The `dashboard_listen` setting: `HOST:PORT` on a loopback address unless named otherwise.

The dashboard shows who holds what, so it is served to this machine only by default: the
admin reaches it through an SSH tunnel or puts a reverse proxy with authentication in front
(docs/dashboard.md). An address that listens everywhere (`0.0.0.0`, `::`, an empty host) is
refused: another interface must be named by its own address.
"""

from __future__ import annotations

import ipaddress

from gpuallocd.errors import ConfigError

__all__ = ["is_loopback", "parse_dashboard_address"]

WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def parse_dashboard_address(text: str) -> tuple[str, int]:
    """(host, port) from `127.0.0.1:8423`, `[::1]:8423` or `localhost:8423`; ConfigError for
    a wildcard host, a missing host or port, or a port outside 1 to 65535."""
    stripped = text.strip()
    host, sep, port_text = stripped.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not sep or (":" in host and not bracketed):
        raise ConfigError(
            f"dashboard_listen must be HOST:PORT (an IPv6 host in brackets), not {text!r}"
        )
    if host in WILDCARDS:
        raise ConfigError(
            f"dashboard_listen = {text!r} would serve every interface: name one address "
            "(127.0.0.1 for this machine, or the one interface the dashboard is for)"
        )
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ConfigError(f"dashboard_listen: the port must be 1 to 65535, not {port_text!r}")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only (`localhost` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
