"""`Client`: one method per API call; server error codes come back as exception classes."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote, urlencode

from gpulease.errors import DaemonUnavailable
from gpulease.models import GpuStatus, Lease
from gpulease.transport import Transport
from gpulease.trust import ServerUid

__all__ = ["Client", "GpuRef"]

GpuRef = str | int  # a GPU UUID, or its index
RESTART_SECONDS = 60.0  # how long a waiting request waits for a restarting daemon
RETRY_SECONDS = 0.5


def _lease_path(lease_id: str, suffix: str = "") -> str:
    return f"/v1/leases/{quote(lease_id, safe='')}{suffix}"


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _request_body(
    count: int | None,
    *,
    gpus: Sequence[GpuRef] | None = None,
    wait: bool = False,
    timeout: float | None = None,
    bind_to_process: bool = False,
    preemptible: bool = False,
    ttl: float | None = None,
    min_runtime: float | None = None,
    preempt_lead: float | None = None,
    preempt_grace: float | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """The body of an allocate (and of its preview) from `Client.allocate`'s keywords."""
    return _drop_none(
        count=count,
        gpus=list(gpus) if gpus else None,
        ttl_seconds=ttl,
        wait=True if wait else None,
        wait_timeout_seconds=timeout if wait else None,
        bind_to_process=True if bind_to_process else None,
        preemptible=True if preemptible else None,
        preempt_min_runtime_seconds=min_runtime,
        preempt_lead_seconds=preempt_lead,
        preempt_grace_seconds=preempt_grace,
        **fields,
    )


class Client:
    """A connection to gpuallocd. Socket: the argument, else $GPUALLOCD_SOCKET, else the default.

    `timeout`: seconds one connect, send or receive may take (None: 30; math.inf: no limit).
    `server_uid`: users besides root and yourself whose server to trust (else
    $GPUALLOCD_SERVER_UID): a uid or user name, several as a list or comma-separated.
    """

    def __init__(
        self,
        socket: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = None,
        server_uid: ServerUid | None = None,
    ) -> None:
        self._transport = Transport(socket, timeout=timeout, server_uid=server_uid)

    @property
    def socket_path(self) -> str:
        return self._transport.socket_path

    def close(self) -> None:
        self._transport.close()

    @property
    def aborted(self) -> bool:
        """Whether `abort` was called: this client sends nothing more."""
        return self._transport.aborted

    def abort(self) -> None:
        """Hang up from another thread: the request in flight (a wait for GPUs) fails with
        DaemonUnavailable, and the daemon drops a waiting request whose client hung up."""
        self._transport.abort()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        """The raw call: decoded JSON, or the exception class of the error code."""
        return self._transport.request(method, path, body, **kwargs)

    # Leases ---------------------------------------------------------------------------------

    def allocate(
        self,
        count: int | None = None,
        *,
        gpus: Sequence[GpuRef] | None = None,
        policy: str | None = None,
        ttl: float | None = None,
        label: str | None = None,
        min_free_memory_bytes: int | None = None,
        wait: bool = False,
        timeout: float | None = None,
        bind_to_process: bool = False,
        memory_bytes: int | None = None,
        mig_profile: str | None = None,
        request_id: str | None = None,
        on_revoke: str | None = None,
        power_limit_watts: int | None = None,
        preemptible: bool = False,
        min_runtime: float | None = None,
        preempt_lead: float | None = None,
        preempt_grace: float | None = None,
        preempt_signal: str | None = None,
        requeue_of: str | None = None,
        follow_work: bool = False,
    ) -> Lease:
        """Lease `count` GPUs (chosen by the policy), including `gpus` where given.

        With `memory_bytes`, a share of that much memory on each of `count` shared GPUs;
        with `mig_profile`, `count` MIG instances of that profile (`gpus` may also name
        `MIG-` UUIDs). Without a count, one.

        With `wait`, queue (first come, first served) until the GPUs are free, for at most
        `timeout` seconds (None: as long as it takes); else fail at once when they are not.
        With `bind_to_process`, the lease ends as soon as this process exits (kill -9 too);
        else it lives until freed, revoked or expired. A bound lease covers the processes
        this one starts too, and ends when the last of them has exited.
        `request_id`: a retry with the same id gets the same lease, never a second one.
        `on_revoke="terminate"`: a revoke stops the lease's processes (SIGTERM, then SIGKILL).
        `power_limit_watts`: cap the leased GPUs' power for the lease (within each card's
        limits; the previous limit is put back at its end).
        `preemptible`: the lease may be preempted for others (docs/preemption.md), not
        before `min_runtime` seconds, warned `preempt_lead` seconds before `preempt_signal`
        (SIGTERM), killed `preempt_grace` seconds after it unless `checkpoint_done` came
        first (each at most the site's bound; None: the bound). `requeue_of`: a preempted
        lease of yours whose place in the queue this request keeps (it is preemptible).
        `follow_work` (with `bind_to_process`): when this process exits, the lease stays
        with this user's processes that carry its id (GPUALLOCD_LEASE_ID) and were started
        after the grant, and ends when the last of them has exited.

        A wait outlives a restart of the daemon: the request is sent again (same id) while
        the daemon comes back, for up to `RESTART_SECONDS` of it not answering.
        """
        if wait and request_id is None:
            request_id = os.urandom(8).hex()
        body = _request_body(
            count,
            gpus=gpus,
            policy=policy,
            ttl=ttl,
            label=label,
            min_free_memory_bytes=min_free_memory_bytes,
            wait=wait,
            timeout=timeout,
            bind_to_process=bind_to_process,
            memory_bytes=memory_bytes,
            mig_profile=mig_profile,
            request_id=request_id,
            on_revoke=on_revoke,
            power_limit_watts=power_limit_watts,
            preemptible=preemptible,
            min_runtime=min_runtime,
            preempt_lead=preempt_lead,
            preempt_grace=preempt_grace,
            preempt_signal=preempt_signal,
            requeue_of=requeue_of,
            follow_work=True if follow_work else None,
        )
        if not wait:
            return Lease.from_json(self.request("POST", "/v1/leases", body))
        return self._wait_for_lease(body, timeout)

    def _wait_for_lease(self, body: dict[str, Any], timeout: float | None) -> Lease:
        """Send a waiting request; again, with the time left, when the daemon went away."""
        deadline = None if timeout is None else time.monotonic() + timeout
        unanswered_since: float | None = None
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            if left is not None:
                body["wait_timeout_seconds"] = left
            try:
                limit = math.inf if left is None else left + 30.0
                return Lease.from_json(self.request("POST", "/v1/leases", body, timeout=limit))
            except DaemonUnavailable as gone:
                if (unanswered_since is None and not gone.reached) or self._transport.aborted:
                    raise  # no daemon there at all (not a restart), or we hung up
                now = time.monotonic()
                unanswered_since = unanswered_since or now
                if now - unanswered_since > RESTART_SECONDS or (deadline and now >= deadline):
                    raise
                time.sleep(RETRY_SECONDS)

    def preview(self, count: int | None = None, **options: Any) -> dict[str, Any]:
        """What `allocate` with the same arguments would do now, writing nothing: `outcome`
        (`granted`, `waits` or `refused`), the `policy`, the `gpus` and terms a grant would
        get, the `refusal` allocate would answer (`code`, `message`, `details`), and where it
        does not fit now, `would_wait`: the place, reason and estimated start of the waiter it
        would be (docs/api.md, `POST /v1/leases/preview`)."""
        body = _request_body(count, **options)
        data: dict[str, Any] = self.request("POST", "/v1/leases/preview", body)
        return data

    def allocate_specific(self, gpus: Sequence[GpuRef], **options: Any) -> Lease:
        """Lease exactly these GPUs (UUIDs or indices)."""
        return self.allocate(gpus=gpus, **options)

    def join(self, lease_id: str) -> Lease:
        """Make this process one of the processes of a bound lease of this user's: the lease
        lasts while it (or anything it starts) runs, as for the holder's own work."""
        return Lease.from_json(self.request("POST", _lease_path(lease_id, "/join"), {}))

    def renew(self, lease_id: str, ttl: float | None = None) -> Lease:
        body = _drop_none(ttl_seconds=ttl)
        return Lease.from_json(self.request("POST", _lease_path(lease_id, "/renew"), body))

    def free(self, lease_id: str) -> Lease:
        return Lease.from_json(self.request("DELETE", _lease_path(lease_id)))

    def revoke(self, lease_id: str, reason: str | None = None) -> Lease:
        body = _drop_none(reason=reason)
        return Lease.from_json(self.request("POST", _lease_path(lease_id, "/revoke"), body))

    def preempt(self, lease_id: str, reason: str | None = None) -> dict[str, Any]:
        """Preempt a preemptible lease (admins): its warning now, its signal after its lead,
        its end at its checkpoint or its deadline. `lease` and `preemption` in the answer."""
        body = _drop_none(reason=reason)
        data: dict[str, Any] = self.request("POST", _lease_path(lease_id, "/preempt"), body)
        return data

    def checkpoint_done(self, lease_id: str, path: str | None = None) -> dict[str, Any]:
        """Your job of `lease_id` saved a checkpoint (at `path`, recorded, never opened by the
        daemon). During a preemption the lease ends now (`ended`); after its deadline the
        acknowledgement is recorded `late`; otherwise it records the job's progress."""
        body = _drop_none(path=None if path is None else os.fspath(path))
        data: dict[str, Any] = self.request("POST", _lease_path(lease_id, "/checkpoint"), body)
        return data

    def lease_events(
        self, lease_id: str, after: int = 0, wait: float = 0.0
    ) -> tuple[Lease, list[dict[str, Any]], dict[str, Any]]:
        """The lease, its history events numbered above `after` (each has a `seq`), and the
        rest of the answer (`revoke_grace_seconds`). With `wait` seconds (at most 300) and no
        such event yet, the daemon answers at the next one, or when the wait is over."""
        seconds = max(0, min(300, math.ceil(wait)))
        path = _lease_path(lease_id, f"/events?after={int(after)}&wait_seconds={seconds}")
        data = self.request("GET", path, timeout=None if seconds == 0 else seconds + 30)
        events: list[dict[str, Any]] = data.pop("events")
        return Lease.from_json(data.pop("lease")), events, data

    def lease(self, lease_id: str) -> Lease:
        return Lease.from_json(self.request("GET", _lease_path(lease_id)))

    # Notices ----------------------------------------------------------------------------------

    def notifications(
        self, after: int = 0, wait: float = 0.0, limit: int = 100, everyone: bool = False
    ) -> dict[str, Any]:
        """The caller's notices numbered above `after` (`notices`, oldest first; `next`, the
        cursor to ask from; `more` when the limit cut the answer). With `wait` seconds (at most
        300) and none yet, the daemon answers at the next one. Root may ask for `everyone`'s."""
        seconds = max(0, min(300, math.ceil(wait)))
        query = urlencode(
            _drop_none(
                after=int(after), wait_seconds=seconds, limit=limit, all=1 if everyone else None
            )
        )
        timeout = None if seconds == 0 else seconds + 30
        result: dict[str, Any] = self.request("GET", f"/v1/notifications?{query}", timeout=timeout)
        return result

    def notify_settings(self) -> dict[str, Any]:
        """The caller's warning thresholds before a lease ends (`thresholds_seconds`)."""
        result: dict[str, Any] = self.request("GET", "/v1/notifications/settings")
        return result

    def set_notify_thresholds(self, seconds: Sequence[float] | None) -> dict[str, Any]:
        """Set the caller's thresholds; None or empty: back to the defaults."""
        body = {"thresholds_seconds": list(seconds) if seconds else None}
        result: dict[str, Any] = self.request("PUT", "/v1/notifications/settings", body)
        return result

    def report_delivery(self, channel: str, kind: str, ok: bool, error: str | None = None) -> None:
        """Tell the daemon how a delivery to one of the caller's channels went (no target)."""
        body = _drop_none(channel=channel, kind=kind, ok=ok, error=error)
        self.request("POST", "/v1/notifications/deliveries", body)

    def forget_channel(self, channel: str) -> None:
        """The caller removed a channel: its delivery report goes."""
        self.request("DELETE", f"/v1/notifications/deliveries/{quote(channel, safe='')}")

    def delivery_reports(self, everyone: bool = False) -> list[dict[str, Any]]:
        """The last delivery of each of the caller's channels (every user's for root)."""
        path = "/v1/notifications/deliveries" + ("?all=1" if everyone else "")
        reports: list[dict[str, Any]] = self.request("GET", path)["channels"]
        return reports

    def leases(self) -> list[Lease]:
        return [Lease.from_json(item) for item in self.request("GET", "/v1/leases")["leases"]]

    # Node -----------------------------------------------------------------------------------

    def status(self) -> list[GpuStatus]:
        return [GpuStatus.from_json(item) for item in self.request("GET", "/v1/gpus")["gpus"]]

    def history(self, lease_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        query = urlencode(_drop_none(lease=lease_id, limit=limit))
        events: list[dict[str, Any]] = self.request("GET", f"/v1/history?{query}")["events"]
        return events

    def topology(self) -> dict[str, Any]:
        """The node's topology in the project's JSON format."""
        data: dict[str, Any] = self.request("GET", "/v1/topology")
        return data

    def rescan(self) -> dict[str, Any]:
        """Rediscover the node's GPUs (root only); the new topology."""
        data: dict[str, Any] = self.request("POST", "/v1/rescan")
        return data

    def queue(self) -> list[dict[str, Any]]:
        """The requests waiting for GPUs, in the order they will be served."""
        waiters: list[dict[str, Any]] = self.request("GET", "/v1/queue")["waiters"]
        return waiters

    def adopt(self, pid: int | None = None, gpu: GpuRef | None = None) -> list[Lease]:
        """Turn the caller's own processes already running on GPUs (one `pid`, those on one
        `gpu`, or all) into the caller's leases, bound to those processes."""
        data = self.request("POST", "/v1/adopt", _drop_none(pid=pid, gpu=gpu))
        return [Lease.from_json(item) for item in data["leases"]]

    def unleased(self, limit: int = 100) -> dict[str, Any]:
        """Processes using GPUs without a lease now (`processes`), the last `limit` actions
        taken on such processes (`events`), and the site's `mode`."""
        data: dict[str, Any] = self.request("GET", f"/v1/unleased?limit={int(limit)}")
        return data

    # Rules of the node: drain, limits, accounting ---------------------------------------------

    def drain(self, gpus: Sequence[GpuRef], reason: str) -> list[GpuStatus]:
        """Take GPUs out of service (admins): no new lease on them; leases on them run out."""
        data = self.request("POST", "/v1/drain", {"gpus": list(gpus), "reason": reason})
        return [GpuStatus.from_json(item) for item in data["gpus"]]

    def undrain(self, gpus: Sequence[GpuRef]) -> list[GpuStatus]:
        """Put drained GPUs back in service (admins)."""
        data = self.request("POST", "/v1/undrain", {"gpus": list(gpus)})
        return [GpuStatus.from_json(item) for item in data["gpus"]]

    def limits(self, user: str | None = None) -> dict[str, Any]:
        """The limits that apply to `user` (default: the caller) and the current use."""
        query = urlencode(_drop_none(user=user))
        data: dict[str, Any] = self.request("GET", f"/v1/limits?{query}")
        return data

    def usage(
        self,
        since: float | None = None,
        until: float | None = None,
        user: str | None = None,
        *,
        per_day: bool = False,
    ) -> dict[str, Any]:
        """GPU-hours, leases and waiting time per user between `since` and `until` (Unix time);
        with `per_day`, also `days`: each local day's start and GPU-hours per user."""
        per = "day" if per_day else None
        query = urlencode(_drop_none(since=since, until=until, user=user, per=per))
        data: dict[str, Any] = self.request("GET", f"/v1/usage?{query}")
        return data

    def admin_actions(self, limit: int = 100) -> list[dict[str, Any]]:
        """The last admin actions (revoke, drain, undrain), oldest first."""
        actions: list[dict[str, Any]] = self.request(
            "GET", f"/v1/admin-actions?limit={int(limit)}"
        )["actions"]
        return actions

    # Advance reservations (docs/scheduling.md) -----------------------------------------------

    def reserve(
        self,
        *,
        duration: float,
        reason: str,
        count: int | None = None,
        gpus: Sequence[GpuRef] = (),
        start_at: float | None = None,
        start_in: float | None = None,
        user: str | None = None,
        group: str | None = None,
        policy: str | None = None,
    ) -> dict[str, Any]:
        """Reserve `count` GPUs (or the `gpus` named) for `user` or the members of `group`
        from `start_at` (Unix time) or `start_in` seconds from now, for `duration` seconds
        (admins)."""
        body = _drop_none(
            count=count,
            gpus=list(gpus) or None,
            start_at=start_at,
            start_in_seconds=None if start_in is None else int(start_in),
            duration_seconds=duration,
            user=user,
            group=group,
            reason=reason,
            policy=policy,
        )
        data: dict[str, Any] = self.request("POST", "/v1/reservations", body)
        return data

    def reservations(self, include_ended: bool = False) -> list[dict[str, Any]]:
        """Reservations to come and running; `include_ended`: every one the ledger keeps."""
        path = "/v1/reservations" + ("?all=1" if include_ended else "")
        found: list[dict[str, Any]] = self.request("GET", path)["reservations"]
        return found

    def unreserve(self, reservation_id: str) -> dict[str, Any]:
        """Cancel a reservation (admins); its GPUs are everyone's again at once."""
        data: dict[str, Any] = self.request(
            "DELETE", f"/v1/reservations/{quote(reservation_id, safe='')}"
        )
        return data

    def policies(self) -> list[str]:
        names: list[str] = self.request("GET", "/v1/policies")["policies"]
        return names

    def health(self) -> dict[str, Any]:
        data: dict[str, Any] = self.request("GET", "/v1/health")
        return data

    def diagnostics(self) -> dict[str, Any]:
        """The daemon's own view of itself: capabilities, the needs of its features, process
        tracking, init system, cgroups, clock, config warnings (what `gpuallocctl doctor`
        shows)."""
        data: dict[str, Any] = self.request("GET", "/v1/diagnostics")
        return data
