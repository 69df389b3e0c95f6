"""The lease model's own behaviour."""

from __future__ import annotations

import dataclasses

from gpuallocd.model import Lease, LeasedGpu, LeaseState, UnitKind
from gpuallocd.model.preemption import PreemptTerms


def test_an_ended_lease_keeps_every_other_field() -> None:
    """`ended` is written out field by field: it must equal dataclasses.replace on every
    field the model has, including any added later (each set to a value unlike its default)."""
    lease = Lease(
        id="abc",
        gpus=(LeasedGpu("MIG-1", 0, kind=UnitKind.MIG, parent="GPU-1", profile="1g.10gb"),),
        owner_uid=1000,
        owner_name="alice",
        pid=42,
        label="sweep",
        policy="simple",
        created_at=1.0,
        expires_at=61.0,
        bound=True,
        pid_start_time=12345,
        waited_seconds=2.5,
        power_limit_watts=250.0,
        on_revoke="terminate",
        preemptible=PreemptTerms(1800.0, 60.0, 300.0),
        follow_work=True,
        power_limit_requested_watts=60.0,
    )
    unset = [
        f.name
        for f in dataclasses.fields(Lease)
        if f.default is not dataclasses.MISSING and getattr(lease, f.name) == f.default
    ]
    assert unset == ["state", "ended_at"]  # a new field gets a value above, and is checked
    ended = lease.ended(LeaseState.FREED, 7.0)
    assert ended == dataclasses.replace(lease, state=LeaseState.FREED, ended_at=7.0)
