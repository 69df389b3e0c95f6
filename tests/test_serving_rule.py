"""The queue's one serving rule (policies/serving.py), as the live queue, its estimates and
`simulate` all play it."""

from __future__ import annotations

from collections.abc import Callable

from gpuallocd.policies.serving import serve_in_order

Wants = dict[str, tuple[int, set[str]]]


def _free_pool_grant(
    free: set[str], wants: Wants
) -> Callable[[str, frozenset[str]], frozenset[str] | None]:
    def grant(name: str, held: frozenset[str]) -> frozenset[str] | None:
        count, pool = wants[name]
        available = sorted((pool & free) - held)
        if len(available) < count:
            return None
        taken = frozenset(available[:count])
        free.difference_update(taken)
        return taken

    return grant


def test_a_small_request_passes_a_blocked_large_one_only_on_gpus_it_could_never_use() -> None:
    """Large wants 3 of A-C (2 free): it holds A and B; small (any GPU) gets D, not A or B."""
    free = {"A", "B", "D"}
    wants = {"large": (3, {"A", "B", "C"}), "small": (1, {"A", "B", "C", "D"})}
    served = serve_in_order(
        ["large", "small"], _free_pool_grant(free, wants), lambda n: wants[n][1]
    )
    assert served == [("small", frozenset({"D"}))]
    assert free == {"A", "B"}


def test_waiters_that_fit_are_all_served_in_order() -> None:
    """Nothing blocked: each waiter is served in turn from what the ones before it left."""
    free = {"A", "B", "C"}
    wants = {"one": (1, {"A", "B", "C"}), "two": (2, {"A", "B", "C"})}
    served = serve_in_order(["one", "two"], _free_pool_grant(free, wants), lambda n: wants[n][1])
    assert served == [("one", frozenset({"A"})), ("two", frozenset({"B", "C"}))]
