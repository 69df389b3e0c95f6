"""The problem the subset search solves, and its answer: plain immutable values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SubsetProblem", "SubsetResult"]


@dataclass(frozen=True, slots=True)
class SubsetProblem:
    """Items 0..n-1: a linear term each, a pair matrix, a size.

    `pair` is symmetric, non-negative and zero on its diagonal; it may be empty when
    `size` <= 1, since no set of one item has a pair.
    """

    linear: Sequence[int]
    pair: Sequence[Sequence[int]]
    size: int


@dataclass(frozen=True, slots=True)
class SubsetResult:
    items: tuple[int, ...]
    value: int
    exact: bool
    nodes: int
