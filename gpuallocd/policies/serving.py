"""The queue's one serving rule, pure: the live queue, its estimates and `simulate` play it.

Waiters are served in order. Each is granted what it asks for where that fits without the
GPUs held for a waiter ahead of it; one that does not fit holds every GPU it could use for
those behind it. So a small request passes a blocked large one only on GPUs the large one
could never use, and never delays it.

`serve_in_order` plays the rule waiter by waiter. `serve_where_free` plays the same rule but
looks only at the waiters that could use a unit still free and not held: a waiter none of
whose units is, can get nothing, and what it would hold is held already or taken. It finds
them through the waiters of each free unit, so serving a queue of thousands behind one busy
GPU costs what the free units' waiters cost, not the length of the queue.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = ["serve_in_order", "serve_where_free"]

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


def serve_where_free(
    lines: Iterable[tuple[str, Iterable[W]]],
    free: Callable[[str], bool],
    grant: Callable[[W, frozenset[str]], G | None],
    pool: Callable[[W], Iterable[str]],
    key: Callable[[W], Any],
) -> list[tuple[W, G]]:
    """`serve_in_order` over the waiters in `key` order, looking only at those with a unit
    that is `free` and not held when their turn comes.

    `lines`: for each unit, one or more lines of the waiters that could use it, each line in
    `key` order (a unit may come with several lines: they are merged). The rule's result is
    the same as `serve_in_order`'s where, during the call:
    - `grant(waiter, held)` returns None for a waiter none of whose lines' units is free and
      not held, and depends on `held` only through its free units;
    - `pool(waiter)` is among the units of the waiter's lines;
    - a unit that is not `free` does not become free again, and keys are distinct.
    """
    held: set[str] = set()
    served: list[tuple[W, G]] = []
    heap: list[tuple[Any, int, str, W, Iterator[W]]] = []
    order = itertools.count()

    def queue_next(unit: str, line: Iterator[W]) -> None:
        for waiter in line:
            heapq.heappush(heap, (key(waiter), next(order), unit, waiter, line))
            return

    for unit, line in lines:
        if free(unit):
            queue_next(unit, iter(line))
    last: Any = object()  # the key of the waiter looked at last
    while heap:
        at, _, unit, waiter, line = heapq.heappop(heap)
        if unit in held or not free(unit):
            continue  # nobody behind can have it any more
        if at != last:  # a waiter comes once per unit it could use, one after the other
            last = at
            got = grant(waiter, frozenset(held))
            if got is None:
                held.update(pool(waiter))
            else:
                served.append((waiter, got))
        if unit not in held and free(unit):
            queue_next(unit, line)
    return served
