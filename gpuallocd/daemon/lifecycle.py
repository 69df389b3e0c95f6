"""The daemon's lifecycle: start up, serve until signalled, shut down.

Start: take the state lock, open the inventory and the ledger, build the allocator, bind
the socket and serve. Background tasks expire leases and sample live GPU state. SIGTERM
and SIGINT stop it: the socket stops accepting, requests in flight finish within the grace
period, then everything is closed in reverse order. SIGHUP reads the config again and adopts
its limits and admin groups (and group memberships afresh) without touching leases or
waiters. Everything runs on one event loop thread; only blocking inventory calls (sampling,
rediscovery) go to a thread pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from gpuallocd import __version__
from gpuallocd.allocator import (
    AllocatorFacade,
    IdleRules,
    LeaseLifecycle,
    SiteRules,
)
from gpuallocd.allocator.deadlines import boottime
from gpuallocd.allocator.observer import LeaseObserver, Observers
from gpuallocd.allocator.reservations import forget_members
from gpuallocd.api.app import ApiContext, create_app
from gpuallocd.api.limits import ConnectionLimiter, fit_to_open_files, quiet_accept_errors
from gpuallocd.api.peercred import forget_identities
from gpuallocd.api.server import UnixApiServer, bind_unix_socket, limited_handlers
from gpuallocd.api.tcp_site import Handlers
from gpuallocd.daemon.activation import inherited_api_socket, listen_fd_count
from gpuallocd.daemon.allocator_setup import allocator_settings
from gpuallocd.daemon.diagnostics import config_warnings, diagnostics
from gpuallocd.daemon.energy_setup import energy_price, lease_hardware
from gpuallocd.daemon.enforcement_setup import unleased_rules
from gpuallocd.daemon.housekeeping import Housekeeper
from gpuallocd.daemon.integrity import (
    LEDGER_COMPANIONS,
    check_ledger,
    check_state_files,
    mark_initialised,
    prepare_private_dir,
)
from gpuallocd.daemon.needs import Host, Need, check_needs
from gpuallocd.daemon.sdnotify import notify_ready, notify_stopping, start_watchdog
from gpuallocd.daemon.settings import DaemonConfig
from gpuallocd.daemon.socketwatch import SocketWatch
from gpuallocd.daemon.statelock import StateLock
from gpuallocd.dashboard import DashboardServer
from gpuallocd.enforcement.devices import DeviceAccess, unit_files
from gpuallocd.errors import (
    ConfigError,
    HardwareUnavailable,
    InventoryError,
    LedgerError,
    NvmlError,
    StateUnusable,
)
from gpuallocd.integrations.cdi_writer import CdiSpecWriter
from gpuallocd.inventory import Inventory, open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.metrics import DaemonMetrics, MetricsExporter, take_sample
from gpuallocd.processes import Tracking, choose_tracking

__all__ = ["Daemon"]

log = logging.getLogger("gpuallocd")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNAL = signal.SIGHUP


def site_rules(config: DaemonConfig) -> SiteRules:
    """The limits and admin groups of a config."""
    return SiteRules(limits=config.limits, admin_groups=frozenset(config.admin_groups))


def idle_rules(config: DaemonConfig) -> IdleRules:
    minutes = config.idle_reclaim_minutes
    return IdleRules(
        reclaim_seconds=None if minutes is None else minutes * 60.0,
        grace_seconds=config.idle_grace_minutes * 60.0,
    )


class Daemon:
    """One running gpuallocd."""

    def __init__(
        self,
        config: DaemonConfig,
        *,
        clock: Callable[[], float] = time.time,
        inventory_opener: Callable[[str], Inventory] = open_inventory,
        reload_config: Callable[[], DaemonConfig] | None = None,
        monotonic: Callable[[], float] = boottime,
        initialise: bool = False,
    ) -> None:
        """`inventory_opener` turns the `inventory` setting into a backend (tests pass a fake's);
        `reload_config` reads the config again on SIGHUP (default: keep this one).

        `clock` gives the wall-clock times shown to people, `monotonic` decides expiry.
        `initialise` (`gpuallocd --init`) lets it create a new ledger where there is none.
        """
        self.config = config
        self._clock = clock
        self._monotonic = monotonic
        self._initialise = initialise
        self._open_inventory = inventory_opener
        self._reload_config = reload_config or (lambda: config)
        self._stop = asyncio.Event()
        self._metrics = DaemonMetrics()
        self._facade_in_service: AllocatorFacade | None = None
        self._needs: list[Need] = []

    def request_stop(self) -> None:
        self._stop.set()

    def reload(self) -> None:
        """Adopt the limits and admin groups of the config as it reads now (SIGHUP).

        A config that no longer reads keeps the rules in force, with an error in the log.
        """
        try:
            config = self._reload_config()
        except ConfigError as exc:
            log.error("reload refused, the rules in force stay: %s", exc.message)
            return
        forget_identities()
        forget_members()  # reservations' members, by the user database
        if self._facade_in_service is not None:
            self._facade_in_service.set_rules(site_rules(config))
            self._facade_in_service.unleased.rules = unleased_rules(config)
            self._facade_in_service.unleased.forget_owners()
        log.info("reloaded the limits and admin groups")

    async def run(self) -> None:
        activated = listen_fd_count(os.environ, os.getpid()) > 0
        self._needs = check_needs(self.config, Host.current(socket_activated=activated))
        for warning in config_warnings(self.config):
            log.warning("%s", warning)
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
            ledger = _open_ledger(self.config, self._initialise, self._metrics)
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

    def _tracking(self) -> Tracking:
        tracking = choose_tracking(self.config.process_tracking)
        log.info("process tracking: %s (%s)", tracking.mode, tracking.reason)
        return tracking

    def _facade(self, inventory: Inventory, ledger: Ledger) -> AllocatorFacade:
        lifecycle = LeaseLifecycle(
            ledger,
            inventory.topology(),
            clock=self._clock,
            settings=allocator_settings(self.config),
            rules=site_rules(self.config),
            monotonic=self._monotonic,
            hardware=lease_hardware(inventory, self.config),
        )
        facade = AllocatorFacade(
            lifecycle,
            ledger,
            clock=self._clock,
            observer=self._observers(lifecycle),
            idle=idle_rules(self.config),
            revoke_grace_seconds=self.config.revoke_grace_seconds,
            tracking=self._tracking(),
            unleased=unleased_rules(self.config),
        )
        facade.power.site_default_watts = self.config.lease_power_limit_watts
        self._facade_in_service = facade
        return facade

    def _observers(self, lifecycle: LeaseLifecycle) -> LeaseObserver:
        """The metrics, the CDI spec where `cdi_spec_path` is set, and the device files'
        ACLs with `device_access = "acl"`."""
        path = self.config.cdi_spec_path
        observers: list[LeaseObserver] = [self._metrics, lifecycle.hardware]
        if path is not None:
            observers.append(CdiSpecWriter(path, lifecycle.topology.gpus, lifecycle.leases()))
        if self.config.device_access == "acl":
            files = unit_files(lifecycle.topology.gpus, self.config.device_dir)
            observers.append(DeviceAccess(files, lifecycle.leases()))
        return observers[0] if len(observers) == 1 else Observers(*observers)

    def _exporter(
        self, facade: AllocatorFacade, inventory: Inventory, limiter: ConnectionLimiter
    ) -> MetricsExporter:
        """The metrics; its port's connections under the API's limits (`limiter`)."""
        return MetricsExporter(
            self._metrics,
            lambda: take_sample(facade, inventory),
            listen=self.config.metrics_listen,
            textfile=self.config.metrics_textfile,
            interval_seconds=self.config.sample_interval_seconds,
            handlers=self._handlers(limiter),
        )

    def _handlers(self, limiter: ConnectionLimiter) -> Handlers:
        """Connection handlers of a TCP port (metrics, dashboard) under the API's rules."""
        return functools.partial(
            limited_handlers, limiter=limiter, head_timeout=self.config.request_head_timeout_seconds
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
        housekeeper = Housekeeper(
            facade,
            inventory,
            self.config.sample_interval_seconds,
            retention_seconds=self.config.history_retention_days * 86400.0,
            energy_interval_seconds=self.config.energy_interval_seconds,
        )
        limiter = self._limiter()  # the API socket's, metrics and dashboard ports' connections
        exporter = self._exporter(facade, inventory, limiter)
        listen = self.config.dashboard_listen
        dashboard = DashboardServer(
            facade, ledger.path, self._clock, listen=listen, handlers=self._handlers(limiter)
        )
        started_at = self._clock()
        ctx = ApiContext(
            facade,
            discover=inventory.rescan,
            started_at=started_at,
            body_timeout_seconds=self.config.request_body_timeout_seconds,
            energy_price=energy_price(
                self.config.energy_price_per_kwh, self.config.energy_currency
            ),
            diagnostics=functools.partial(
                diagnostics, self.config, self._needs, facade.process_tracking_stats, started_at
            ),
        )
        socket_path = Path(self.config.socket)
        activated = inherited_api_socket()  # socket activation: systemd owns the path
        sock = activated or bind_unix_socket(
            socket_path, mode=self.config.socket_mode, group=self.config.socket_group
        )
        if activated is not None:
            socket_path = Path(activated.getsockname())
        watch = SocketWatch(socket_path)
        app = create_app(ctx, max_body_bytes=self.config.max_body_bytes)
        server = UnixApiServer(
            app,
            sock,
            grace_seconds=self.config.shutdown_grace_seconds,
            limiter=limiter,
            head_timeout=self.config.request_head_timeout_seconds,
        )
        quiet_accept_errors(asyncio.get_running_loop())
        problem: StateUnusable | None = None
        watchdog = None
        try:
            await housekeeper.start()
            await exporter.start()
            await dashboard.start()
            await server.start()
            with _stop_on_signals(self._stop), _reload_on_hangup(self.reload):
                self._announce(facade, socket_path)
                watchdog = start_watchdog()
                problem = await _first_of(self._stop.wait(), watch.until_gone())
                notify_stopping()
                log.info("stopping")
        finally:
            if watchdog is not None:
                watchdog.cancel()
            facade.stop_waiting()
            await housekeeper.stop()
            await exporter.stop()
            await dashboard.stop()
            await server.stop()
            await facade.close()
            if activated is None and watch.problem() is None:
                socket_path.unlink(missing_ok=True)  # an activated socket is systemd's
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
        # What start-up built lives as long as the daemon: out of the collector's sight, so
        # a full collection scans only what requests made since (shorter pauses).
        gc.freeze()
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


def _open_ledger(config: DaemonConfig, initialise: bool, metrics: DaemonMetrics) -> Ledger:
    path = config.ledger_path
    check_state_files([path, *(path.with_name(path.name + c) for c in LEDGER_COMPANIONS)])
    check_ledger(path, initialise=initialise)
    try:
        ledger = Ledger(path, sync=config.ledger_sync, commit_timer=metrics.observe_commit)
    except LedgerError as exc:
        raise StateUnusable(exc.message) from exc
    mark_initialised(path)
    return ledger


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


@contextlib.contextmanager
def _reload_on_hangup(reload: Callable[[], None]) -> Iterator[None]:
    """SIGHUP reloads the rules; the previous handler comes back after (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = signal.getsignal(RELOAD_SIGNAL)
    loop.add_signal_handler(RELOAD_SIGNAL, reload)
    try:
        yield
    finally:
        loop.remove_signal_handler(RELOAD_SIGNAL)
        signal.signal(RELOAD_SIGNAL, previous)
