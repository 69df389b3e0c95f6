"""POSTing a notice: a webhook (JSON, signed) or an ntfy server, with a timeout on every
attempt, retries with exponential back-off on what may pass (no answer, 5xx, 429), none on
what will not (another 4xx), and no redirect followed.

The address is resolved once per attempt and the connection made to the address that was
checked (never resolved again behind the check): an address that is one of `forbidden` (the
daemon's own metrics and dashboard ports, given by the caller) is refused, whatever name
points at it.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from gpuallocd.model.addresses import is_loopback, plain_address

__all__ = ["DeliveryError", "Forbidden", "Retry", "forbidden_by", "post"]

Sleep = Callable[[float], None]


class DeliveryError(Exception):
    """A delivery that did not happen: why, in words that name no secret."""


@dataclass(frozen=True, slots=True)
class Retry:
    """`attempts` in all; the wait after attempt n is `first_wait * 2**n`, at most `max_wait`."""

    attempts: int = 5
    first_wait: float = 1.0
    max_wait: float = 60.0
    timeout: float = 10.0

    def wait(self, attempt: int) -> float:
        return float(min(self.max_wait, self.first_wait * 2**attempt))


@dataclass(frozen=True, slots=True)
class Forbidden:
    """Addresses nothing may be posted to: (ip, port); an unspecified ip (0.0.0.0, ::) stands
    for every address of this host."""

    addresses: frozenset[tuple[str, int]] = frozenset()

    def refuses(self, ip: str, port: int) -> bool:
        for listen_ip, listen_port in self.addresses:
            if port != listen_port:
                continue
            address, listen = plain_address(ip), plain_address(listen_ip)
            if address == listen or (listen.is_unspecified and _is_local(str(address))):
                return True
            if is_loopback(listen_ip) and is_loopback(ip):
                return True
        return False


def forbidden_by(listens: Iterable[str]) -> Forbidden:
    """The daemon's ports as /v1/health names them (`HOST:PORT`, `[V6]:PORT`)."""
    found: set[tuple[str, int]] = set()
    for listen in listens:
        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        try:
            for info in socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP):
                found.add((str(info[4][0]), int(port)))
        except (OSError, ValueError):
            continue
    return Forbidden(frozenset(found))


def _is_local(ip: str) -> bool:
    """Whether `ip` is an address of this host (binding to it works only then)."""
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((ip, 0))
        except OSError:
            return False
    return True


class _Pinned(http.client.HTTPConnection):
    """A connection to the one address that was checked."""

    def __init__(self, ip: str, host: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._ip = ip

    def connect(self) -> None:
        self.sock = socket.create_connection((self._ip, self.port), self.timeout)


class _PinnedTls(_Pinned):
    def connect(self) -> None:
        super().connect()
        context = ssl.create_default_context()
        self.sock = context.wrap_socket(self.sock, server_hostname=self.host)


def _resolve(host: str, port: int, forbidden: Forbidden) -> str:
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise DeliveryError(f"cannot resolve the host: {exc.strerror or exc}") from None
    ips = [str(info[4][0]) for info in infos]
    if any(forbidden.refuses(ip, port) for ip in ips):
        raise DeliveryError("refused: the URL points at one of gpuallocd's own ports")
    return ips[0]


def _attempt(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float, f: Forbidden
) -> int:
    parts = urllib.parse.urlsplit(url)
    tls = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if tls else 80)
    ip = _resolve(host, port, f)
    kind = _PinnedTls if tls else _Pinned
    connection = kind(ip, host, port, timeout)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    try:
        connection.request("POST", path, body=body, headers=dict(headers))
        response = connection.getresponse()
        response.read(64 * 1024)
        return response.status
    finally:
        connection.close()


def post(
    url: str,
    body: bytes,
    headers: Callable[[], Mapping[str, str]],
    *,
    retry: Retry = Retry(),
    forbidden: Forbidden = Forbidden(),
    sleep: Sleep = time.sleep,
) -> int:
    """POST `body` until a 2xx answers; how many attempts it took. `headers()` is called for
    each attempt (a signature's timestamp is that attempt's). DeliveryError when it gave up."""
    problem = "no attempt"
    for attempt in range(retry.attempts):
        if attempt:
            sleep(retry.wait(attempt - 1))
        try:
            status = _attempt(url, body, headers(), retry.timeout, forbidden)
        except DeliveryError:
            raise
        except TimeoutError:
            problem = f"no answer within {retry.timeout:g} s"
            continue
        except (OSError, http.client.HTTPException) as exc:
            problem = f"connection failed: {getattr(exc, 'strerror', None) or exc}"
            continue
        if 200 <= status < 300:
            return attempt + 1
        problem = f"HTTP {status}"
        if 300 <= status < 400:
            raise DeliveryError(f"{problem}: redirects are not followed")
        if 400 <= status < 500 and status != 429:
            raise DeliveryError(problem)
    raise DeliveryError(f"{problem} (gave up after {retry.attempts} attempts)")
