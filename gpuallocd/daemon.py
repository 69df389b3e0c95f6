"""`gpuallocd`: the daemon's lifecycle. Start up, serve until signalled, shut down.

Start: take the state lock, open the inventory and the ledger, build the allocator, bind
the socket and serve. Background tasks expire leases and sample live GPU state. SIGTERM
and SIGINT stop it: the socket stops accepting, requests in flight finish within the grace
period, then everything is closed in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from gpuallocd import __version__
from gpuallocd.api.app import ApiContext, create_app
from gpuallocd.api.server import UnixApiServer, bind_unix_socket
from gpuallocd.config import DaemonConfig, load_config
from gpuallocd.errors import GpuallocError
from gpuallocd.housekeeping import Housekeeper
from gpuallocd.inventory import Inventory, open_inventory
from gpuallocd.ledger import Ledger
from gpuallocd.sdnotify import notify_ready, notify_stopping
from gpuallocd.service import Allocator, ServiceSettings
from gpuallocd.statelock import StateLock
from gpuallocd.waitqueue import WaitQueue
from gpuallocd.writer import SerialWorker

__all__ = ["Daemon", "main"]

log = logging.getLogger("gpuallocd")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Daemon:
    """One running gpuallocd."""

    def __init__(self, config: DaemonConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self._clock = clock
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        state_dir = Path(self.config.state_dir)
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = StateLock(self.config.lock_path)
        lock.acquire(self.config.socket)
        try:
            await self._run_locked()
        finally:
            lock.release()

    async def _run_locked(self) -> None:
        inventory = open_inventory(self.config.inventory)
        try:
            ledger = Ledger(self.config.ledger_path, sync=self.config.ledger_sync)
            try:
                await self._serve(inventory, ledger)
            finally:
                ledger.close()
        finally:
            inventory.close()

    def _allocator(self, inventory: Inventory, ledger: Ledger) -> Allocator:
        settings = ServiceSettings(
            default_policy=self.config.default_policy,
            default_ttl_seconds=self.config.default_ttl_seconds,
            max_ttl_seconds=self.config.max_ttl_seconds,
        )
        return Allocator(ledger, inventory.topology(), clock=self._clock, settings=settings)

    async def _serve(self, inventory: Inventory, ledger: Ledger) -> None:
        allocator = self._allocator(inventory, ledger)
        worker = SerialWorker(ledger.unit_of_work, on_commit_failure=allocator.reload)
        queue = WaitQueue(allocator, worker, self._clock)
        housekeeper = Housekeeper(
            allocator, worker, queue, inventory, self.config.sample_interval_seconds
        )
        ctx = ApiContext(
            allocator,
            worker,
            queue,
            housekeeper.watcher,
            discover=inventory.rescan,
            started_at=self._clock(),
        )
        socket_path = Path(self.config.socket)
        sock = bind_unix_socket(
            socket_path, mode=self.config.socket_mode, group=self.config.socket_group
        )
        app = create_app(ctx, max_body_bytes=self.config.max_body_bytes)
        server = UnixApiServer(app, sock, grace_seconds=self.config.shutdown_grace_seconds)
        try:
            await housekeeper.start()
            await server.start()
            with _stop_on_signals(self._stop):
                self._announce(allocator, socket_path)
                await self._stop.wait()
                notify_stopping()
                log.info("stopping")
        finally:
            await housekeeper.stop()
            await server.stop()
            worker.close()
            with contextlib.suppress(FileNotFoundError):
                socket_path.unlink()

    @staticmethod
    def _announce(allocator: Allocator, socket_path: Path) -> None:
        topology = allocator.topology
        log.info(
            "gpuallocd %s serving %d GPU(s) of %s on %s",
            __version__,
            len(topology.gpus),
            topology.name,
            socket_path,
        )
        notify_ready()


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


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--socket", type=click.Path(dir_okay=False), help="Unix socket to serve on.")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Ledger and lock directory.")
@click.option(
    "--inventory",
    help="`nvml` for the real GPUs, or a topology file, or `example:NAME` for a bundled one.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML config file.",
)
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]))
@click.version_option(__version__, prog_name="gpuallocd")
def main(
    socket: str | None,
    state_dir: str | None,
    inventory: str | None,
    config_file: Path | None,
    log_level: str | None,
) -> None:
    """Run the GPU allocation daemon in the foreground."""
    try:
        config = load_config(
            config_file,
            socket=socket,
            state_dir=state_dir,
            inventory=inventory,
            log_level=log_level,
        )
        logging.basicConfig(
            level=config.log_level, stream=sys.stderr, format="gpuallocd: %(levelname)s %(message)s"
        )
        logging.getLogger("filelock").setLevel(logging.WARNING)
        asyncio.run(Daemon(config).run())
    except GpuallocError as exc:
        click.echo(f"gpuallocd: {exc.message}", err=True)
        sys.exit(1)
    except OSError as exc:
        click.echo(f"gpuallocd: {exc}", err=True)
        sys.exit(1)
