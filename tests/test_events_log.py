"""The daemon logs each grant, free, expiry and revoke at INFO, one key=value line each."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable

from gpuallocd.allocator.leases.events_log import Transition, format_transition
from gpuallocd.model import Lease, LeasedGpu, LeaseEvent
from tests.harness import ProcessDaemon, wait_for


def events(daemon: ProcessDaemon) -> list[dict[str, str]]:
    """The key=value lines of the daemon's log, parsed as a shell would split them."""
    found = []
    for line in daemon.stderr().splitlines():
        _, sep, rest = line.partition("INFO event=")
        if sep:
            found.append(dict(item.split("=", 1) for item in shlex.split("event=" + rest)))
    return found


def test_grant_free_expiry_and_revoke_are_logged_once_each(
    process_daemon: Callable[..., ProcessDaemon],
) -> None:
    """A real daemon's log has one line per transition, with user, GPUs and who ended it."""
    daemon = process_daemon()
    with daemon.client() as client:
        freed = client.allocate(2, label="resnet sweep")
        client.free(freed.id)
        revoked = client.allocate(1)
        client.revoke(revoked.id, reason="maintenance")
        expiring = client.allocate(1, ttl=0.2)
        time.sleep(0.3)  # past its TTL; the next call expires it
        client.leases()
    wait_for(lambda: len(events(daemon)) == 6, timeout=10)
    logged = events(daemon)
    assert [(e["event"], e["lease"]) for e in logged] == [
        ("granted", freed.id),
        ("freed", freed.id),
        ("granted", revoked.id),
        ("revoked", revoked.id),
        ("granted", expiring.id),
        ("expired", expiring.id),
    ]
    grant = logged[0]
    assert grant["label"] == "resnet sweep" and grant["bound"] == "no" and grant["pid"] == "-"
    assert grant["gpus"] == ",".join(str(i) for i in freed.indices)
    assert grant["uuids"] == ",".join(freed.uuids) and grant["ttl"] == "3600"
    assert logged[1]["by"] == grant["user"]
    assert logged[3]["by"] == "root" and logged[3]["detail"] == "maintenance"
    assert "by" not in logged[5]


def test_values_with_spaces_or_quotes_are_quoted() -> None:
    """A label with spaces, quotes or `=` stays one value; plain values stay bare."""
    lease = Lease(
        id="abc",
        gpus=(LeasedGpu("GPU-1", 0),),
        owner_uid=1000,
        owner_name="alice",
        pid=42,
        label='say "hi" a=b',
        policy="simple",
        created_at=0.0,
        expires_at=60.0,
        bound=True,
    )
    line = format_transition(Transition(LeaseEvent.GRANTED, lease, 1000))
    assert re.search(r'label="say \\"hi\\" a=b"', line)
    assert dict(item.split("=", 1) for item in shlex.split(line))["label"] == 'say "hi" a=b'
    assert line.startswith("event=granted lease=abc user=alice uid=1000 gpus=0 pid=42 bound=yes")
