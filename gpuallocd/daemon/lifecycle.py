"""The daemon's lifecycle: start up, serve until signalled, shut down.

Start: take the state lock, open the inventory and the ledger, build the allocator, bind
the socket and serve. Background tasks expire leases and sample live GPU state. SIGTERM
and SIGINT stop it: the socket stops accepting, requests in flight finish within the grace
period, then everything is closed in reverse order. Everything runs on one event loop
thread; only blocking inventory calls (sampling, rediscovery) go to a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from gpuallocd import __version__
from gpuallocd.allocator import AllocatorFacade, AllocatorSettings, LeaseLifecycle
from gpuallocd.allocator.deadlines import boottime
from gpuallocd.api.app import ApiContext, create_app
from gpuallocd.api.limits import ConnectionLimiter, fit_to_open_files, quiet_accept_errors
from gpuallocd.api.server import UnixApiServer, bind_unix_socket
from gpuallocd.daemon.housekeeping import Housekeeper
from gpuallocd.daemon.integrity import (
    LEDGER_COMPANIONS,
    check_ledger,
    check_state_files,
    prepare_private_dir,
)
from gpuallocd.daemon.sdnotify import notify_ready, notify_stopping
from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.daemon.socketwatch import SocketWatch
from gpuallocd.daemon.statelock import StateLock
from gpuallocd.errors import (
    HardwareUnavailable,
    InventoryError,
    LedgerError,
    NvmlError,
    StateUnusable,
)
from gpuallocd.inventory import Inventory, open_inventory
from gpuallocd.ledger import Ledger

__all__ = ["Daemon"]

log = logging.getLogger("gpuallocd")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Daemon:
    """One running gpuallocd."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        clock: Callable[[], float] = time.time,
        inventory_opener: Callable[[str], Inventory] = open_inventory,
        monotonic: Callable[[], float] = boottime,
        initialise: bool = False,
    ) -> None:
        """`inventory_opener` turns the `inventory` setting into a backend (tests pass a fake's).

        `clock` gives the wall-clock times shown to people, `monotonic` decides expiry.
        `initialise` (`gpuallocd --init`) lets it create a new ledger where there is none.
        """
        self.config = config
        self._clock = clock
        self._monotonic = monotonic
        self._initialise = initialise
        self._open_inventory = inventory_opener
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        prepare_private_dir(Path(self.config.state_dir), "state directory", 0o700)
        prepare_private_dir(Path(self.config.socket).parent, "socket's directory", 0o755)
        lock = StateLock(self.config.lock_path)
        lock.acquire(self.config.socket)
        try:
            await self._run_locked()
        finally:
            lock.release()

    async def _run_locked(self) -> None:
        inventory = self._inventory()
        try:
            ledger = _open_ledger(self.config, self._initialise)
            try:
                await self._serve(inventory, ledger)
            finally:
                ledger.close()
        finally:
            inventory.close()

    def _inventory(self) -> Inventory:
        try:
            return self._open_inventory(self.config.inventory)
        except (NvmlError, InventoryError) as exc:
            raise HardwareUnavailable(exc.message) from exc

    def _facade(self, inventory: Inventory, ledger: Ledger) -> AllocatorFacade:
        settings = AllocatorSettings(
            default_policy=self.config.default_policy,
            default_ttl_seconds=self.config.default_ttl_seconds,
            max_ttl_seconds=self.config.max_ttl_seconds,
        )
        lifecycle = LeaseLifecycle(
            ledger,
            inventory.topology(),
            clock=self._clock,
            settings=settings,
            monotonic=self._monotonic,
        )
        return AllocatorFacade(
            lifecycle,
            ledger,
            clock=self._clock,
            revoke_grace_seconds=self.config.revoke_grace_seconds,
        )

    def _limiter(self) -> ConnectionLimiter:
        config = self.config
        return ConnectionLimiter(
            per_user=config.max_connections_per_user,
            total=fit_to_open_files(config.max_connections),
            root_reserve=config.root_reserved_connections,
        )

    async def _serve(self, inventory: Inventory, ledger: Ledger) -> None:
        facade = self._facade(inventory, ledger)
        housekeeper = Housekeeper(facade, inventory, self.config.sample_interval_seconds)
        ctx = ApiContext(
            facade,
            discover=inventory.rescan,
            started_at=self._clock(),
            body_timeout_seconds=self.config.request_body_timeout_seconds,
        )
        socket_path = Path(self.config.socket)
        sock = bind_unix_socket(
            socket_path, mode=self.config.socket_mode, group=self.config.socket_group
        )
        watch = SocketWatch(socket_path)
        app = create_app(ctx, max_body_bytes=self.config.max_body_bytes)
        server = UnixApiServer(
            app,
            sock,
            grace_seconds=self.config.shutdown_grace_seconds,
            limiter=self._limiter(),
            head_timeout=self.config.request_head_timeout_seconds,
        )
        quiet_accept_errors(asyncio.get_running_loop())
        problem: StateUnusable | None = None
        try:
            await housekeeper.start()
            await server.start()
            with _stop_on_signals(self._stop):
                self._announce(facade, socket_path)
                problem = await _first_of(self._stop.wait(), watch.until_gone())
                notify_stopping()
                log.info("stopping")
        finally:
            await housekeeper.stop()
            await server.stop()
            await facade.close()
            if watch.problem() is None:
                socket_path.unlink(missing_ok=True)
        if problem is not None:
            raise problem

    @staticmethod
    def _announce(facade: AllocatorFacade, socket_path: Path) -> None:
        topology = facade.topology
        log.info(
            "gpuallocd %s serving %d GPU(s) of %s on %s",
            __version__,
            len(topology.gpus),
            topology.name,
            socket_path,
        )
        notify_ready()


async def _first_of(
    stop: Coroutine[Any, Any, Any], gone: Coroutine[Any, Any, StateUnusable]
) -> StateUnusable | None:
    """Wait for a stop request or the loss of the socket; the loss, if that came first."""
    stop_task, gone_task = asyncio.ensure_future(stop), asyncio.ensure_future(gone)
    try:
        await asyncio.wait({stop_task, gone_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (stop_task, gone_task):
            task.cancel()
    if gone_task.done() and not gone_task.cancelled():
        problem = gone_task.result()
        log.error("%s", problem.message)
        return problem
    return None


def _open_ledger(config: DaemonConfig, initialise: bool) -> Ledger:
    path = config.ledger_path
    check_state_files([path, *(path.with_name(path.name + c) for c in LEDGER_COMPANIONS)])
    check_ledger(path, initialise=initialise)
    try:
        return Ledger(config.ledger_path, sync=config.ledger_sync)
    except LedgerError as exc:
        raise StateUnusable(exc.message) from exc


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGTERM and SIGINT stop the daemon; the previous handlers come back after.

    Signals reach the main thread only: a daemon embedded in another thread (tests, other
    programs) is stopped with `Daemon.request_stop()` instead.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, previous[sig])
