"""A webhook's signature: HMAC-SHA256 over the timestamp and the body, keyed by the channel's
secret (made for that channel alone, kept in its owner's file).

The header reads `X-Gpuallocd-Signature: t=1767225600,v1=<hex>`; the MAC covers
`"<t>.<body>"`, so a receiver that checks it and refuses a `t` older than a few minutes
(`verify`'s `tolerance_seconds`) refuses a replayed delivery as well as a forged one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["SIGNATURE_HEADER", "new_secret", "sign", "verify"]

SIGNATURE_HEADER = "X-Gpuallocd-Signature"
SECRET_BYTES = 32


def new_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    message = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The header's value for `body` sent at `timestamp` (seconds since the epoch)."""
    return f"t={timestamp},v1={_mac(secret, timestamp, body)}"


def verify(
    secret: str, header: str, body: bytes, now: float, tolerance_seconds: float = 300.0
) -> bool:
    """Whether `header` signs `body` with `secret`, sent within the tolerance of `now`."""
    fields = dict(part.partition("=")[::2] for part in header.split(","))
    try:
        timestamp = int(fields.get("t", ""))
    except ValueError:
        return False
    if abs(now - timestamp) > tolerance_seconds:
        return False
    return hmac.compare_digest(fields.get("v1", ""), _mac(secret, timestamp, body))
