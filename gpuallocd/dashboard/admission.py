"""How many pages the dashboard serves: a token bucket over all clients together."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """`rate` admissions a second on average, up to `rate` at once after a quiet second."""

    def __init__(self, rate: float, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._clock = clock
        self._tokens = rate
        self._at = clock()

    def admit(self) -> bool:
        """Take one token; False (and nothing taken) when none is left."""
        now = self._clock()
        self._tokens = min(self._rate, self._tokens + max(0.0, now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True
