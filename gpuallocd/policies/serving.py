"""The queue's one serving rule, pure: the live queue, its estimates and `simulate` play it.

Waiters are served in order. Each is granted what it asks for where that fits without the
GPUs held for a waiter ahead of it; one that does not fit holds every GPU it could use for
those behind it. So a small request passes a blocked large one only on GPUs the large one
could never use, and never delays it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["serve_in_order"]

W = TypeVar("W")
G = TypeVar("G")


def serve_in_order(
    waiters: Iterable[W],
    grant: Callable[[W, frozenset[str]], G | None],
    pool: Callable[[W], Iterable[str]],
) -> list[tuple[W, G]]:
    """Each waiter served in order: `grant(waiter, held)` gives what it got (and records it),
    or None where it does not fit without the `held` GPUs; `pool(waiter)`: every GPU it could
    use, held from then on for those behind it. Returns what each served waiter got."""
    served: list[tuple[W, G]] = []
    held: set[str] = set()
    for waiter in waiters:
        got = grant(waiter, frozenset(held))
        if got is None:
            held.update(pool(waiter))
        else:
            served.append((waiter, got))
    return served
