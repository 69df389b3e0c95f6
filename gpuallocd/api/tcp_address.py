"""`HOST:PORT` for the TCP ports beside the socket (`metrics_listen`, `dashboard_listen`), and
whether a host is this machine only. One parser, used by the daemon and by `doctor` alike.
"""

from __future__ import annotations

from gpuallocd.errors import ConfigError
from gpuallocd.model.addresses import is_loopback

__all__ = ["WILDCARDS", "is_loopback_address", "parse_host_port"]

# Hosts that mean "every interface".
WILDCARDS = frozenset({"", "0.0.0.0", "::", "*"})


def parse_host_port(text: str, setting: str, *, allow_wildcard: bool) -> tuple[str, int]:
    """(host, port) from `127.0.0.1:9423`, `[::1]:9423` or `localhost:9423`.

    ConfigError, naming `setting`, when the host or the port is missing, an IPv6 host is not
    in brackets, the port is not 1 to 65535, or the host means every interface and
    `allow_wildcard` is false.
    """
    stripped = text.strip()
    host, sep, port_text = stripped.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    host = host[1:-1] if bracketed else host
    if not sep or (":" in host and not bracketed) or (not host and allow_wildcard):
        raise ConfigError(f"{setting} must be HOST:PORT (an IPv6 host in brackets), not {text!r}")
    if host in WILDCARDS and not allow_wildcard:
        raise ConfigError(
            f"{setting} = {text!r} would serve every interface: name one address "
            "(127.0.0.1 for this machine, or the one interface it is for)"
        )
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ConfigError(f"{setting}: the port must be 1 to 65535, not {port_text!r}")
    return host, int(port_text)


def is_loopback_address(text: str) -> bool:
    """Whether a `HOST:PORT` setting names this machine only (False when it does not parse;
    `model/addresses.py` judges the host)."""
    try:
        host, _ = parse_host_port(text, "address", allow_wildcard=True)
    except ConfigError:
        return False
    return is_loopback(host)
