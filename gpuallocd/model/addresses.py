"""Whether an address is this machine only: the one rule for the metrics and dashboard ports'
settings, the peers of those ports, and the webhooks that may not point at them.

An IPv4 peer of an IPv6 listener shows as `::ffff:127.0.0.1`; it is the IPv4 address it
maps, loopback included, everywhere. A scope (`fe80::1%eth0`) is not part of the address.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "plain_address"]

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def plain_address(text: str) -> Address:
    """The address `text` names, without its scope, an IPv4-mapped IPv6 address as its IPv4
    self; ValueError where `text` is no address."""
    address = ipaddress.ip_address(text.partition("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine only: `localhost`, or a loopback address (IPv4-mapped
    ones included)."""
    if host == "localhost":
        return True
    try:
        return plain_address(host).is_loopback
    except ValueError:
        return False
