"""What the NVML and amdsmi gates share: start a vendor library once, on first use and
under a lock, and shut it down once, at close or at interpreter exit."""

from __future__ import annotations

import atexit
import threading
from typing import Any

from gpuallocd.errors import GpuallocError
from gpuallocd.inventory.calls import CallWatch

__all__ = ["LibraryGate"]


class LibraryGate:
    """Lifecycle of one vendor library; subclasses say how to load, start and stop it.

    `calls` records every library call while it runs (see calls.py).
    """

    def __init__(self, library: Any | None = None) -> None:
        self._lib: Any = library
        self.calls = CallWatch()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False

    def start(self) -> None:
        """Load and initialise the library if not done yet."""
        if self._started:
            return
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if not self._started:
                self._load()
                self._init()
                self._started = True
                atexit.register(self.shutdown)

    def shutdown(self) -> None:
        """Stop the library if this gate started it; safe to call more than once."""
        with self._lock:
            started, self._started, self._closed = self._started, False, True
        if not started:
            return
        atexit.unregister(self.shutdown)
        self._stop()

    def _closed_error(self) -> GpuallocError:
        raise NotImplementedError

    def _load(self) -> None:
        raise NotImplementedError

    def _init(self) -> None:
        raise NotImplementedError

    def _stop(self) -> None:
        raise NotImplementedError
