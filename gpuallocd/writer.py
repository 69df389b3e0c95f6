"""The single writer thread: every call on the allocator runs here, one at a time."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

__all__ = ["SerialWorker"]

P = ParamSpec("P")
T = TypeVar("T")


class SerialWorker:
    """Runs blocking calls on one dedicated thread, in the order they were submitted."""

    def __init__(self, name: str = "gpuallocd-writer") -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
