"""The `metrics_listen` setting: `HOST:PORT`, with an IPv6 host in brackets."""

from __future__ import annotations

from gpuallocd.errors import ConfigError

__all__ = ["parse_listen_address"]


def parse_listen_address(text: str) -> tuple[str, int]:
    """(host, port) from `127.0.0.1:9423`, `[::1]:9423` or `localhost:9423`.

    ConfigError when the host or the port is missing, or the port is not 1 to 65535.
    """
    host, sep, port_text = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or (":" in host and not text.strip().startswith("[")):
        raise ConfigError(
            f"metrics_listen must be HOST:PORT (an IPv6 host in brackets), not {text!r}"
        )
    try:
        port = int(port_text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ConfigError(f"metrics_listen: the port must be 1 to 65535, not {port_text!r}")
    return host, port
