"""How many pages the dashboard serves, fairly: each client (the uid the kernel names for a
connection, else its address) has a bucket of its own, smaller than the one of all clients
together, and a cap on its loads in flight; so no client alone can empty the shared bucket
or fill the renderer, and a page load of another is answered while one loops."""

from __future__ import annotations

from collections.abc import Callable, Hashable

__all__ = ["BUSY", "TOO_FAST", "FairAdmission", "TokenBucket"]

BUSY = "busy"  # too many loads in flight: 503
TOO_FAST = "too fast"  # past a bucket: 429


class TokenBucket:
    """`rate` admissions a second on average, up to `burst` (default `rate`) at once after a
    quiet while."""

    def __init__(self, rate: float, clock: Callable[[], float], burst: float | None = None) -> None:
        self._rate = rate
        self._burst = rate if burst is None else burst
        self._clock = clock
        self._tokens = self._burst
        self._at = clock()

    def admit(self) -> bool:
        """Take one token; False (and nothing taken) when none is left."""
        self._fill()
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def full(self) -> bool:
        """Whether the bucket is back to its burst (a client quiet long enough to forget)."""
        self._fill()
        return self._tokens >= self._burst

    def _fill(self) -> None:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + max(0.0, now - self._at) * self._rate)
        self._at = now


class FairAdmission:
    """Admits a client's load within its own bucket and in-flight cap, then within the
    shared bucket and in-flight cap; `done` when the load is answered."""

    def __init__(
        self,
        *,
        rate: float,
        per_client_rate: float,
        in_flight: int,
        per_client_in_flight: int,
        clock: Callable[[], float],
        max_clients: int = 1024,
    ) -> None:
        self._clock = clock
        self._shared = TokenBucket(rate, clock)
        self._per_client_rate = per_client_rate
        self._in_flight = in_flight
        self._per_client_in_flight = per_client_in_flight
        self._max_clients = max_clients
        self._buckets: dict[Hashable, TokenBucket] = {}
        self._busy: dict[Hashable, int] = {}

    def admit(self, client: Hashable) -> str | None:
        """Count a load of `client` in flight, or say why not, BUSY or TOO_FAST (nothing is
        counted then)."""
        if sum(self._busy.values()) >= self._in_flight:
            return BUSY
        if self._busy.get(client, 0) >= self._per_client_in_flight:
            return BUSY
        if not self._bucket(client).admit() or not self._shared.admit():
            return TOO_FAST
        self._busy[client] = self._busy.get(client, 0) + 1
        return None

    def done(self, client: Hashable) -> None:
        left = self._busy.get(client, 0) - 1
        if left > 0:
            self._busy[client] = left
        else:
            self._busy.pop(client, None)

    def _bucket(self, client: Hashable) -> TokenBucket:
        bucket = self._buckets.get(client)
        if bucket is None:
            if len(self._buckets) >= self._max_clients:
                self._forget_quiet()
            bucket = self._buckets[client] = TokenBucket(self._per_client_rate, self._clock)
        return bucket

    def _forget_quiet(self) -> None:
        """Drop the buckets of clients quiet long enough to be full again (nothing lost)."""
        for client in [c for c, b in self._buckets.items() if b.full()]:
            del self._buckets[client]
