"""The daemon's lifecycle: start up, serve until signalled, shut down.

Start: take the state lock, open the inventory and the ledger, build the allocator, bind
the socket and serve. Background tasks expire leases and sample live GPU state. SIGTERM
and SIGINT stop it: the socket stops accepting, requests in flight finish within the grace
period, then everything is closed in reverse order. SIGHUP reads the config again and adopts
its limits, admin groups and power budget (and group memberships afresh) without touching
leases; a waiter the new figures could never serve is ended when the queue next looks.
Everything runs on one event loop thread; only blocking inventory calls (sampling,
rediscovery) go to a thread of their own, one at a time, with a deadline (driver_guard.py).
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
from gpuallocd.allocator import AllocatorFacade
from gpuallocd.allocator.crash_points import arm
from gpuallocd.allocator.leases.deadlines import boottime
from gpuallocd.api.app import ApiContext, create_app
from gpuallocd.api.limits import ConnectionLimiter, connection_limiters, quiet_accept_errors
from gpuallocd.api.server import UnixApiServer, bind_unix_socket, limited_handlers
from gpuallocd.api.tcp_site import Handlers, port_report
from gpuallocd.daemon.assembly import assemble
from gpuallocd.daemon.config.machine_checks import ConfigState
from gpuallocd.daemon.config.notify_checks import site_channels
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.daemon.config.wiring import energy_price, site_rules, unleased_rules
from gpuallocd.daemon.diagnostics import diagnostics
from gpuallocd.daemon.driver_guard import DriverGuard, close_within
from gpuallocd.daemon.housekeeping import Housekeeper
from gpuallocd.daemon.ledger_care.opening import ledger_backups, open_ledger, with_ledger_status
from gpuallocd.daemon.sdnotify import notify_ready, notify_stopping, start_watchdog
from gpuallocd.daemon.site_notices import SiteNotices, site_secret
from gpuallocd.daemon.socketwatch import SocketWatch
from gpuallocd.daemon.startup.activation import inherited_api_socket, listen_fd_count
from gpuallocd.daemon.startup.integrity import prepare_private_dir
from gpuallocd.daemon.startup.needs import Host, Need, warn_weakened
from gpuallocd.daemon.startup.preflight import preflight
from gpuallocd.daemon.startup.statelock import StateLock
from gpuallocd.dashboard import DashboardServer
from gpuallocd.errors import (
    ConfigError,
    HardwareUnavailable,
    InventoryError,
    NvmlError,
    StateUnusable,
)
from gpuallocd.host import users
from gpuallocd.inventory import Inventory, open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.metrics import DaemonMetrics, MetricsExporter, take_sample
from gpuallocd.processes import Tracking, choose_tracking

__all__ = ["Daemon"]

log = logging.getLogger("gpuallocd")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELOAD_SIGNAL = signal.SIGHUP


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
        self._rules = site_rules(config)  # in force: the config's, then each reload's
        self._config_state = ConfigState(config)  # its warnings, and a reload refused

    def request_stop(self) -> None:
        self._stop.set()

    def reload(self) -> None:
        """Adopt the limits, admin groups and power budget of the config as it reads now
        (SIGHUP).

        A config that no longer reads keeps the rules in force, with an error in the log.
        """
        try:
            config = self._reload_config()
        except ConfigError as exc:
            log.error("reload refused, the rules in force stay: %s", exc.message)
            self._config_state.refuse(exc.message, self._clock())
            return
        self._rules = site_rules(config)
        users.forget()  # names and groups, read afresh (host/users.py)
        for warning in self._config_state.adopt(config):
            log.warning("%s", warning)
        if self._facade_in_service is not None:
            power = (config.power_budget_watts, config.power_fit)
            self._facade_in_service.reload_rules(self._rules, unleased_rules(config), power)
        log.info("reloaded the limits, admin groups and power budget")

    async def run(self) -> None:
        activated = listen_fd_count(os.environ, os.getpid()) > 0
        arm()  # crash points, for tests only (allocator/crash_points.py)
        host = Host.current(socket_activated=activated)
        self._needs = preflight(self.config, host, activated)  # every refusal before a write
        inventory = self._inventory()
        try:
            warn_weakened(self._needs)
            for warning in self._config_state.warnings:
                log.warning("%s", warning)
            prepare_private_dir(Path(self.config.state_dir), "state directory", 0o700)
            prepare_private_dir(Path(self.config.socket).parent, "socket's directory", 0o755)
            lock = StateLock(self.config.lock_path)
            lock.acquire(self.config.socket)
            try:
                await self._run_locked(inventory)
            finally:
                lock.release()
        finally:
            close_within(inventory.close, self.config.driver_call_timeout_seconds)

    async def _run_locked(self, inventory: Inventory) -> None:
        ledger = open_ledger(self.config, self._initialise, self._metrics)
        try:
            await self._serve(inventory, ledger)
        finally:
            ledger.close()

    def _inventory(self) -> Inventory:
        try:
            return self._open_inventory(self.config.inventory)
        except (NvmlError, InventoryError) as exc:
            raise HardwareUnavailable(exc.message) from exc

    def _tracking(self) -> Tracking:
        tracking = choose_tracking(self.config.process_tracking)
        log.info("process tracking: %s (%s)", tracking.mode, tracking.reason)
        return tracking

    def _facade(self, inventory: Inventory, ledger: Ledger, guard: DriverGuard) -> AllocatorFacade:
        """The allocator, every part of it made and handed out in daemon/assembly.py."""
        facade = assemble(
            self.config,
            inventory,
            ledger,
            guard,
            clock=self._clock,
            monotonic=self._monotonic,
            rules=self._rules,
            metrics=self._metrics,
            tracking=self._tracking(),
        )
        self._facade_in_service = facade
        return facade

    def _exporter(
        self, facade: AllocatorFacade, inventory: Inventory, limiter: ConnectionLimiter
    ) -> MetricsExporter:
        """The metrics; its port's connections under the ports' limits (`limiter`)."""
        return MetricsExporter(
            self._metrics,
            lambda: take_sample(facade, inventory),
            listen=self.config.metrics_listen,
            textfile=self.config.metrics_textfile,
            interval_seconds=self.config.sample_interval_seconds,
            handlers=self._handlers(limiter),
        )

    def _handlers(self, limiter: ConnectionLimiter) -> Handlers:
        """Connection handlers of a TCP port (metrics, dashboard) under the API's rules, within
        the ports' own budget (`limiter`)."""
        return functools.partial(
            limited_handlers, limiter=limiter, head_timeout=self.config.request_head_timeout_seconds
        )

    def _limiters(self) -> tuple[ConnectionLimiter, ConnectionLimiter]:
        """The API socket's connection budget and the TCP ports', apart."""
        config = self.config
        return connection_limiters(
            per_user=config.max_connections_per_user,
            total=config.max_connections,
            root_reserve=config.root_reserved_connections,
            ports=config.metrics_listen is not None or config.dashboard_listen is not None,
        )

    async def _serve(self, inventory: Inventory, ledger: Ledger) -> None:
        guard = DriverGuard.of(inventory, deadline_seconds=self.config.driver_call_timeout_seconds)
        facade = self._facade(inventory, ledger, guard)
        housekeeper = Housekeeper(
            facade,
            inventory,
            self.config.sample_interval_seconds,
            retention_seconds=self.config.history_retention_days * 86400.0,
            guard=guard,
            energy_interval_seconds=self.config.energy_interval_seconds,
        )
        limiter, on_ports = self._limiters()  # the API socket's; the TCP ports'
        exporter = self._exporter(facade, inventory, on_ports)
        listen = self.config.dashboard_listen
        price = energy_price(self.config)
        dashboard = DashboardServer(
            facade,
            ledger.path,
            self._clock,
            listen=listen,
            handlers=self._handlers(on_ports),
            energy_price=price,
        )
        started_at = self._clock()
        ports = port_report(exporter.port, dashboard.port)
        about = (self.config, self._needs, facade.process_tracking_stats, started_at, ports)
        backups = ledger_backups(self.config, lambda: self._rules)
        site = SiteNotices(
            facade,
            site_channels(
                self.config.notify_site_channels, site_secret(self.config.notify_site_secret_file)
            ),
            self.config.notify_site_events,
        )
        ctx = ApiContext(
            facade,
            discover=functools.partial(guard.answer, "rescan", inventory.rescan),
            driver=guard.report,
            started_at=started_at,
            body_timeout_seconds=self.config.request_body_timeout_seconds,
            diagnostics=with_ledger_status(functools.partial(diagnostics, *about), backups),
            ports=ports,
            ledger_admin=backups,
            config_report=self._config_state.report,
            energy_price=price,
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
            self._config_state.power = lambda: facade.power.readings
            for warning in self._config_state.power_warnings():
                log.warning("%s", warning)
            await exporter.start()
            await dashboard.start()
            await server.start()
            await backups.start()
            await site.start()
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
            await site.stop()
            await housekeeper.stop()
            await exporter.stop()
            await dashboard.stop()
            await server.stop()
            await facade.close()
            await backups.stop()  # the clean stop's backup, after the last commit
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
