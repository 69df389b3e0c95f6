"""What callers can do with the client's models (Lease, LeasedGpu, GpuStatus): they are
frozen dataclasses, whatever makes them cheap to define."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from gpulease import GpuStatus, Lease, LeasedGpu

from tests.harness import ThreadDaemon


def a_lease(daemon: ThreadDaemon) -> Lease:
    with daemon.client() as client:
        return client.allocate(1, label="models")


def test_a_lease_answered_by_the_daemon_is_a_frozen_dataclass(daemon: ThreadDaemon) -> None:
    """fields, replace, asdict and astuple work on a Lease, and assigning a field is refused."""
    lease = a_lease(daemon)
    assert dataclasses.is_dataclass(lease) and dataclasses.is_dataclass(lease.gpus[0])
    names = [f.name for f in dataclasses.fields(Lease)]
    assert names == [
        *("id", "gpus", "state", "owner_uid", "user", "pid", "label", "policy"),
        *("created_at", "expires_at", "raw"),
    ]
    relabelled = dataclasses.replace(lease, label="other")
    assert relabelled.label == "other" and relabelled.id == lease.id and relabelled != lease
    as_dict = dataclasses.asdict(lease)
    assert as_dict["label"] == "models" and as_dict["gpus"][0]["uuid"] == lease.gpus[0].uuid
    assert dataclasses.astuple(lease.gpus[0])[:2] == (lease.gpus[0].index, lease.gpus[0].uuid)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.label = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del lease.gpus[0].uuid  # type: ignore[misc]


def test_equality_and_hash_ignore_the_raw_answer(daemon: ThreadDaemon) -> None:
    """Two leases with the same fields are equal and hash alike, whatever `raw` holds."""
    lease = a_lease(daemon)
    same = dataclasses.replace(lease, raw={})
    assert same == lease and hash(same) == hash(lease) and {lease, same} == {lease}
    assert lease != dataclasses.replace(lease, state="freed")
    assert lease.gpus[0] == LeasedGpu(index=lease.gpus[0].index, uuid=lease.gpus[0].uuid)
    assert lease != object() and lease.gpus[0] != (lease.gpus[0].index, lease.gpus[0].uuid)


def test_repr_names_every_field_but_raw() -> None:
    """repr reads like the constructor call, without `raw`."""
    gpu = LeasedGpu(index=0, uuid="GPU-a")
    assert repr(gpu) == (
        "LeasedGpu(index=0, uuid='GPU-a', kind='whole', parent_uuid=None, memory_bytes=None, "
        "mig_profile=None, fraction=1.0)"
    )
    status = GpuStatus(
        index=1, uuid="GPU-b", name="H100", state="free", lease_id=None, raw={"x": 1}
    )
    assert repr(status) == (
        "GpuStatus(index=1, uuid='GPU-b', name='H100', state='free', lease_id=None)"
    )


def test_models_copy_pickle_and_match_by_position(daemon: ThreadDaemon) -> None:
    """A lease survives pickle and copy, and `case Lease(id, gpus)` matches by position."""
    lease = a_lease(daemon)
    assert pickle.loads(pickle.dumps(lease)) == lease
    assert copy.copy(lease) == lease and copy.deepcopy(lease) == lease
    match lease:
        case Lease(lease_id, (LeasedGpu(index, uuid),)):
            assert (lease_id, index, uuid) == (lease.id, lease.gpus[0].index, lease.gpus[0].uuid)
        case _:
            pytest.fail("a one-GPU lease did not match by position")


def test_models_keep_their_defaults() -> None:
    """A LeasedGpu is a whole GPU unless told otherwise; `raw` defaults to an empty dict."""
    gpu = LeasedGpu(2, "GPU-c")
    assert (gpu.kind, gpu.fraction, gpu.parent_uuid, gpu.memory_bytes) == ("whole", 1.0, None, None)
    status = GpuStatus(0, "GPU-d", "A100", "free", None)
    assert status.raw == {} and status.raw is not GpuStatus(0, "GPU-d", "A100", "free", None).raw
