"""`gpu_lease`: lease GPUs for a block of code (or a function), and give them back after."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Sequence
from contextlib import ContextDecorator
from types import TracebackType
from typing import Any

from gpulease.client import Client, GpuRef
from gpulease.errors import DaemonUnavailable, GpuallocError, LeaseNotActive, UnknownLease
from gpulease.lease_id import LEASE_ID_VARIABLE
from gpulease.models import Lease
from gpulease.nesting import check_nested, enclosing_lease, note, part_of
from gpulease.preemption import HeldLease, OnPreempt, PreemptState, PreemptWatch
from gpulease.renewer import OnIdle, OnRevoke, OnUnhealthy, Renewer
from gpulease.sizes import parse_size, parse_watts

__all__ = ["gpu_lease", "visible_devices_env"]

ENV_KEYS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    LEASE_ID_VARIABLE,
    "GPUALLOCD_MEMORY_BYTES",
    "GPUALLOCD_ON_REVOKE",
)


def visible_devices_env(lease: Lease, visible: str = "uuid") -> dict[str, str]:
    """The environment that shows a process exactly the GPUs of `lease`.

    UUIDs by default: they name the same GPU whatever order CUDA enumerates in, and MIG
    devices can only be named so. `visible="index"` gives indices with
    `CUDA_DEVICE_ORDER=PCI_BUS_ID`, for tools that parse the variable as integers (not for
    MIG instances, which have no index). A memory share adds GPUALLOCD_MEMORY_BYTES, the
    share's size on each GPU, for the job to cap its memory to (docs/sharing.md).
    """
    share = (
        {} if lease.memory_bytes is None else {"GPUALLOCD_MEMORY_BYTES": str(lease.memory_bytes)}
    )
    if visible == "uuid":
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(lease.uuids),
            LEASE_ID_VARIABLE: lease.id,
            **share,
        }
    if visible == "index":
        if any(g.kind == "mig" for g in lease.gpus):
            raise ValueError("MIG instances can only be named by UUID: use visible='uuid'")
        return {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in lease.indices),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            LEASE_ID_VARIABLE: lease.id,
            **share,
        }
    raise ValueError(f"visible must be 'uuid' or 'index', not {visible!r}")


class gpu_lease(ContextDecorator):  # reads as a function at the call site
    """Lease GPUs for the body of a `with` block, or for each call of a decorated function.

    Sets CUDA_VISIBLE_DEVICES before the body runs (enter it before CUDA initialises), renews
    the lease in a background thread, frees it on exit (on an exception too) and restores the
    environment. `as` gives the Lease: `.id` and `.gpus` (each with `.index` and `.uuid`).
    The lease is bound to this process: if the process dies (kill -9 too), the daemon frees it.
    `memory="20G"` leases a share of 20 GiB on each of `count` shared GPUs (exported as
    GPUALLOCD_MEMORY_BYTES); `mig="1g.10gb"` leases `count` MIG instances of that profile.
    Where the daemon reclaims idle leases, a RuntimeWarning (or `on_idle(lease, idle)`) tells
    the holder once the lease's GPUs have been idle long enough to be taken for a waiter.
    A GPU of the lease that fails (an Xid) is told at the next renewal: a RuntimeWarning,
    GpuUnhealthy raised in the main thread (`on_unhealthy="raise"`), or
    `on_unhealthy(lease, gpus)`, each GPU with `index`, `uuid` and `reason`.
    Inside a lease (GPUALLOCD_LEASE_ID names a live lease of the caller's, as under
    `gpuallocctl run`) the block uses that lease when it covers the request, says so on
    stderr, sets `nested` True, and neither renews nor frees it; it refuses a request the
    lease cannot cover (InvalidRequest). `nested="new"` takes a lease of its own instead.
    `power_limit="250W"` caps the leased GPUs' power while the lease lasts.
    `preemptible=True` lets the daemon preempt the lease for others (docs/preemption.md): not
    before `min_runtime` seconds; at the warning `lease.preempt_requested` turns True (with
    `lease.preempt_deadline`) and `on_preempt(lease, preemption)` is called; `preempt_lead`
    seconds later `preempt_signal` (SIGTERM) is raised in this process; the job saves and calls
    `lease.checkpoint_done(path)`, which ends the lease; else it is killed `preempt_grace`
    seconds after the signal. `lease.checkpoint_done(path)` at other times records progress.
    `raise_preempt_signal=False`: the signal is not raised here (a wrapper whose command gets
    it from the daemon, as `gpuallocctl run`, which follows its lease's stream itself);
    without `on_preempt` too, the block's lease does not follow its stream at all.
    After the block, `end_state` is the state the free found the lease already in ("revoked",
    "expired", ...) when something else had ended it; None when the free ended it.
    """

    def __init__(
        self,
        count: int = 1,
        *,
        gpus: Sequence[GpuRef] | None = None,
        policy: str | None = None,
        ttl: float | None = None,
        wait: bool = False,
        timeout: float | None = None,
        label: str | None = None,
        memory: str | int | None = None,
        mig: str | None = None,
        min_free_memory_bytes: int | None = None,
        socket: str | os.PathLike[str] | None = None,
        visible: str = "uuid",
        on_revoke: OnRevoke = "warn",
        on_idle: OnIdle | None = None,
        on_unhealthy: OnUnhealthy = "warn",
        nested: str = "reuse",
        power_limit: str | int | None = None,
        preemptible: bool = False,
        min_runtime: float | None = None,
        preempt_lead: float | None = None,
        preempt_grace: float | None = None,
        preempt_signal: str | None = None,
        on_preempt: OnPreempt | None = None,
        requeue_of: str | None = None,
        raise_preempt_signal: bool = True,
    ) -> None:
        self._nested_choice = check_nested(nested)
        if on_unhealthy not in ("warn", "raise") and not callable(on_unhealthy):
            raise ValueError("on_unhealthy must be 'warn', 'raise' or a callable")
        if on_revoke not in ("warn", "raise", "terminate") and not callable(on_revoke):
            raise ValueError("on_revoke must be 'warn', 'raise', 'terminate' or a callable")
        if mig is not None and visible == "index":
            raise ValueError("MIG instances can only be named by UUID: use visible='uuid'")
        self._options: dict[str, Any] = {
            "count": max(count, len(gpus)) if gpus else count,
            "gpus": list(gpus) if gpus else None,
            "policy": policy,
            "ttl": ttl,
            "label": label,
            "memory_bytes": None if memory is None else parse_size(memory),
            "mig_profile": mig,
            "min_free_memory_bytes": min_free_memory_bytes,
            "power_limit_watts": None if power_limit is None else parse_watts(power_limit),
            "preemptible": preemptible,
            "min_runtime": min_runtime,
            "preempt_lead": preempt_lead,
            "preempt_grace": preempt_grace,
            "preempt_signal": preempt_signal,
            "requeue_of": requeue_of,
        }
        self._wait, self._timeout = wait, timeout
        self._socket, self._visible, self._on_revoke = socket, visible, on_revoke
        self._on_idle = on_idle
        self._on_unhealthy = on_unhealthy
        self._on_preempt = on_preempt
        self._raise_preempt_signal = raise_preempt_signal
        self._client: Client | None = None
        self._renewer: Renewer | None = None
        self._watch: PreemptWatch | None = None
        self._saved_env: dict[str, str | None] = {}
        self._entered_in: int | None = None  # the pid that entered the block
        self.lease: Lease | None = None
        self.nested = False  # True while the block runs under the enclosing lease
        self.end_state: str | None = None  # how the lease had ended before the free, if it had

    @property
    def client(self) -> Client | None:
        """The connection the lease was granted through, open while the block runs (None
        outside it): for further calls about the lease without a connection of their own."""
        return self._client

    def _recreate_cm(self) -> gpu_lease:
        # Each call of a decorated function takes a lease of its own.
        import copy  # here: `with gpu_lease(...)` never needs it

        fresh = copy.copy(self)
        fresh._client, fresh._renewer, fresh._saved_env, fresh.lease = None, None, {}, None
        fresh._watch = None
        fresh.nested = False
        fresh.end_state = None
        return fresh

    def __enter__(self) -> Lease:
        client = Client(self._socket)
        try:
            outer = enclosing_lease(client, self._nested_choice)
            lease = part_of(outer, self._options) if outer else self._acquire(client)
        except BaseException:
            client.close()
            raise
        self._entered_in = os.getpid()
        lease = self._watched(client, lease, relay=outer is None and self._raise_preempt_signal)
        self._client, self.lease = client, lease
        env = visible_devices_env(lease, self._visible)
        if self._on_revoke == "terminate":  # for the work to read; the daemon reads the ledger
            env["GPUALLOCD_ON_REVOKE"] = "terminate"
        self._set_env(env)
        if outer is not None:
            self.nested = True
            print(note(outer, lease), file=sys.stderr)
            return lease
        idle = {"on_idle": self._on_idle} if self._on_idle else {}
        self._renewer = Renewer(
            client,
            lease,
            self._options["ttl"],
            self._on_revoke,
            threading.get_ident(),
            on_unhealthy=self._on_unhealthy,
            **idle,
        )
        self._renewer.start()
        return lease

    def _watched(self, client: Client, lease: Lease, *, relay: bool) -> HeldLease:
        """The lease, hearing of its preemption where it may have one (preemptible, or an
        enclosing lease that is): `relay` raises its signal here (this process holds it)."""
        state = PreemptState()
        held = HeldLease.of(lease, state, lambda path: client.checkpoint_done(lease.id, path))
        quiet = not relay and self._on_preempt is None and not self._raise_preempt_signal
        if lease.raw.get("preemptible") is None or quiet:
            return held  # not preemptible, or a wrapper that follows its lease itself
        socket = client.socket_path

        def told(preemption: dict[str, object]) -> None:
            if self._on_preempt is not None:
                self._on_preempt(held, dict(preemption))

        self._watch = PreemptWatch(
            lambda: Client(socket),
            lease.id,
            state,
            on_preempt=told,
            relay_to=self._entered_in if relay else None,
        )
        self._watch.start()
        return held

    def _acquire(self, client: Client) -> Lease:
        """Allocate; a request whose answer was lost is sent once more with the same id, so
        it gets the lease the first one was granted (or the daemon withdrew it)."""
        request_id = os.urandom(8).hex()  # `secrets` costs ~5 ms of import time
        try:
            return self._allocate_once(client, request_id)
        except DaemonUnavailable:
            return self._allocate_once(client, request_id)

    def _allocate_once(self, client: Client, request_id: str) -> Lease:
        return client.allocate(
            wait=self._wait,
            timeout=self._timeout,
            bind_to_process=True,
            request_id=request_id,
            on_revoke="terminate" if self._on_revoke == "terminate" else None,
            **self._options,
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._entered_in is not None and os.getpid() != self._entered_in:
            self._restore_env()  # a forked child leaves the block: the lease is its parent's
            return
        try:
            if self._watch is not None:
                self._watch.stop()
                self._watch = None
            if self._renewer is not None:
                self._renewer.stop()
            if not self.nested:
                self._free()
        finally:
            self._restore_env()
            if self._client is not None:
                self._client.close()
                self._client = None

    def _free(self) -> None:
        if self._client is None or self.lease is None:
            return
        with contextlib.suppress(UnknownLease):
            try:
                self._client.free(self.lease.id)
            except LeaseNotActive as ended:
                self.end_state = ended.details.get("state")
            except DaemonUnavailable as error:
                _warn_unfreed(self.lease, error)

    def _set_env(self, values: dict[str, str]) -> None:
        self._saved_env = {key: os.environ.get(key) for key in ENV_KEYS}
        for key in ENV_KEYS:
            os.environ.pop(key, None)
        os.environ.update(values)

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}


def _warn_unfreed(lease: Lease, error: GpuallocError) -> None:
    print(
        f"gpulease: could not free lease {lease.id} ({error.message}); it ends when it expires",
        file=sys.stderr,
    )
