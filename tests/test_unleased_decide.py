"""The pure parts of enforcement: the decision over one sample (`enforcement/decide.py`), the
POSIX ACL xattr (`enforcement/acl.py`) and which device files a unit has (`devices.py`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gpuallocd.enforcement import Seen, Step, Track, UnitUse, UnleasedRules, decide
from gpuallocd.enforcement.acl import RW, Acl, grant_user, read_acl, revoke_user
from gpuallocd.enforcement.devices import mig_minors, unit_files
from gpuallocd.model import Gpu, MigDevice

GPU = "GPU-a"


def seen(
    pid: int = 100,
    uid: int | None = 1001,
    user: str = "bob",
    command: str = "python3",
    program: str | None = None,
) -> Seen:
    return Seen(pid, 5, uid, user, command, command, GPU, 3, GPU, program=program)


def steps(actions: list) -> list[Step]:  # type: ignore[type-arg]
    return [a.step for a in actions]


def test_report_is_once_per_process() -> None:
    """A process is reported at the first sample it is seen in, and never again."""
    rules, use = UnleasedRules(), {GPU: UnitUse()}
    first, tracks = decide([seen()], use, {}, rules, 0.0)
    again, _ = decide([seen()], use, tracks, rules, 1.0)
    assert (steps(first), steps(again)) == ([Step.REPORT], [])


def test_terminate_follows_the_grace_then_kill_after() -> None:
    """SIGTERM once the grace has passed since first seen; SIGKILL `kill_after` later; once."""
    rules = UnleasedRules(mode="terminate", grace_seconds=60, kill_after_seconds=10)
    use, tracks, found = {GPU: UnitUse()}, {}, []
    for now in (0.0, 59.0, 60.0, 65.0, 70.0, 80.0):
        actions, tracks = decide([seen()], use, tracks, rules, now)
        found.append(steps(actions))
    assert found == [[Step.REPORT], [], [Step.TERMINATE], [], [Step.KILL], []]


def test_holders_exempt_and_root_are_spared() -> None:
    """The holder's own process is no offender; an exempt command (by its trusted program) or
    user is not looked at; root's process and one of an unknown owner are reported and never
    signalled; a process merely named like an exempt command is terminated."""
    rules = UnleasedRules(mode="terminate", grace_seconds=0, exempt_users=frozenset({"carol"}))
    use = {GPU: UnitUse(holders=frozenset({1001}), lease_ids=("L",))}
    processes = [
        seen(1, 1001),
        seen(2, 1002, "dave", "Xorg", program="Xorg"),
        seen(3, 1003, "carol"),
        seen(4, 0, "root"),
        seen(5, None, "unknown"),
        seen(6, 1004, "bob", "Xorg", program="sleep"),
    ]
    actions, _ = decide(processes, use, {}, rules, 0.0)
    assert [(a.seen.pid, a.step) for a in actions] == [
        (4, Step.REPORT),
        (6, Step.REPORT),
        (6, Step.TERMINATE),
    ]


def test_adopt_where_free_else_falls_back() -> None:
    """Adopted on a free unit; refused (over a limit), reported, and with
    `over_limit = "terminate"` terminated after the grace."""
    rules = UnleasedRules(mode="adopt", over_limit="terminate", grace_seconds=5)
    free = {GPU: UnitUse(adoptable=True)}
    actions, _ = decide([seen()], free, {}, rules, 0.0)
    assert steps(actions) == [Step.ADOPT]
    refused = {seen().key: Track(0.0, reported=True, adopt_refused=True)}
    assert steps(decide([seen()], free, refused, rules, 1.0)[0]) == []
    assert steps(decide([seen()], free, refused, rules, 5.0)[0]) == [Step.TERMINATE]


@given(
    st.lists(st.integers(min_value=1, max_value=50), max_size=20),
    st.sampled_from(["off", "report", "terminate", "adopt"]),
)
def test_decide_only_acts_on_offenders_and_forgets_the_gone(pids: list[int], mode: str) -> None:
    """Whatever the sample: actions name only processes of it, and the tracks kept are of
    processes in it."""
    rules = UnleasedRules(mode=mode, grace_seconds=0)
    processes = [seen(pid, 1000 + pid % 3) for pid in pids]
    use = {GPU: UnitUse(holders=frozenset({1000}))}
    actions, tracks = decide(processes, use, {(999, 5, GPU): Track(0.0)}, rules, 1.0)
    keys = {p.key for p in processes}
    assert {a.seen.key for a in actions} <= keys and set(tracks) <= keys
    assert all(a.seen.uid != 1000 for a in actions)


def test_acl_round_trips_and_grants_only_the_user(tmp_path: Path) -> None:
    """The xattr decodes to what was encoded; a named user brings a mask; taking the last
    named user off restores the mode's group bits."""
    node = tmp_path / "nvidia0"
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(195, 0))
    grant_user(str(node), 4242)
    acl = read_acl(str(node))
    assert acl.users() == {4242: RW} and Acl.decode(acl.encode()) == acl
    assert stat.S_IMODE(os.stat(node).st_mode) == 0o660  # the mask shows as group bits
    revoke_user(str(node), 4242)
    assert read_acl(str(node)).users() == {}
    assert stat.S_IMODE(os.stat(node).st_mode) == 0o600


def test_device_files_of_whole_gpus_mig_instances_and_amd(tmp_path: Path) -> None:
    """NVIDIA by minor number, a MIG instance its GPU's file and its capability files from
    the driver's mig-minors table, AMD by render node (index fallback)."""
    minors = tmp_path / "mig-minors"
    minors.write_text("gpu1/gi2/access 21\ngpu1/gi2/ci0/access 22\ngpu1/gi3/access 30\n")
    mig = MigDevice(uuid="MIG-x", gpu_instance_id=2, compute_instance_id=0)
    gpus = [
        Gpu(uuid="GPU-0", index=0),
        Gpu(uuid="GPU-1", index=1, mig_mode=True, mig_devices=(mig,)),
        Gpu(uuid="GPU-2", index=2, vendor="amd"),
    ]
    files = unit_files(
        gpus,
        "/d",
        nodes={"GPU-0": "/dev/nvidia4"},
        minors=mig_minors(minors),
        sys_root=tmp_path,
    )
    assert files == {
        "GPU-0": ("/d/nvidia4",),
        "GPU-1": ("/d/nvidia1",),
        "MIG-x": ("/d/nvidia1", "/d/nvidia-caps/nvidia-cap21", "/d/nvidia-caps/nvidia-cap22"),
        "GPU-2": ("/d/dri/renderD130",),
    }
