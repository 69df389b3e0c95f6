"""Cases 4 and 5: the daemon trusts only a state directory that is its own, with its ledger."""

from __future__ import annotations

import os
from pathlib import Path

from gpuallocd.errors import StateUnusable
from tests.harness import DaemonPaths, ProcessDaemon, wait_until_serving
from tests.local_users import LocalUser, run_as

SECRET = "root's own\n"


def _start(paths: DaemonPaths, *, initialise: bool) -> ProcessDaemon:
    return ProcessDaemon(paths, initialise=initialise, default_policy="simple").start(wait=False)


def _refusal(daemon: ProcessDaemon) -> str:
    assert daemon.process is not None
    assert daemon.process.wait(60) == StateUnusable.exit_code, daemon.stderr()
    return daemon.stderr()


def _initialised(paths: DaemonPaths) -> Path:
    """A state directory that served once: it holds a ledger with a lease in it."""
    daemon = ProcessDaemon(paths, default_policy="simple").start()
    with daemon.client() as client:
        client.allocate(2)
    assert daemon.stop() == 0
    return paths.state_dir / "ledger.sqlite3"


def test_an_empty_ledger_is_refused_not_taken_for_a_new_one(paths: DaemonPaths) -> None:
    """A 0-byte ledger stops the daemon (73); --init sets it aside and starts a new one."""
    ledger = _initialised(paths)
    ledger.write_bytes(b"")
    assert "is empty (0 bytes)" in _refusal(_start(paths, initialise=False))
    daemon = _start(paths, initialise=True)
    try:
        wait_until_serving(paths.socket)
        with daemon.client() as client:
            assert client.leases() == []
    finally:
        daemon.stop()
    set_aside = [p for p in paths.state_dir.iterdir() if p.name.startswith("ledger.sqlite3.empty-")]
    assert len(set_aside) == 1


def test_a_missing_ledger_needs_init(paths: DaemonPaths) -> None:
    """A state directory that held a ledger, now without one, and no --init: exit 73, telling
    the admin about --init; the leases are not silently forgotten."""
    ledger = _initialised(paths)
    ledger.unlink()
    for companion in ("-wal", "-shm"):
        ledger.with_name(ledger.name + companion).unlink(missing_ok=True)
    assert "--init" in _refusal(_start(paths, initialise=False))


def test_a_first_start_creates_the_ledger_and_its_marker(paths: DaemonPaths) -> None:
    """A state directory that never held a ledger gets one without --init (a new install)."""
    daemon = ProcessDaemon(paths, initialise=False, default_policy="simple").start()
    with daemon.client() as client:
        assert client.leases() == []
    assert daemon.stop() == 0
    assert (paths.state_dir / "initialised").is_file()


def test_init_keeps_an_existing_ledger(paths: DaemonPaths) -> None:
    """--init on a state directory with a ledger uses it as it is: the lease is still there."""
    _initialised(paths)
    daemon = ProcessDaemon(paths, initialise=True, default_policy="simple").start()
    with daemon.client() as client:
        assert len(client.leases()) == 1
    daemon.stop()


def test_a_state_dir_writable_by_others_is_refused(
    users: tuple[LocalUser, LocalUser], paths: DaemonPaths, short_dir: Path
) -> None:
    """Another user's link in a world-writable state dir: the daemon refuses, the file it
    points at is untouched."""
    ana, _ = users
    secret = short_dir / "root-only.txt"
    secret.write_text(SECRET)
    os.chmod(secret, 0o600)
    os.chmod(short_dir, 0o755)
    paths.state_dir.mkdir(mode=0o777)
    os.chmod(paths.state_dir, 0o777)
    plant = f"import os; os.symlink({str(secret)!r}, {str(paths.state_dir / 'gpuallocd.holder')!r})"
    planter = run_as(ana, plant, paths.socket)
    _, err = planter.communicate(timeout=30)
    assert planter.returncode == 0, err
    assert "writable by others" in _refusal(_start(paths, initialise=True))
    assert secret.read_text() == SECRET


def test_a_state_dir_owned_by_another_user_is_refused(
    users: tuple[LocalUser, LocalUser], paths: DaemonPaths
) -> None:
    """A state directory that belongs to another user: exit 73."""
    ana, _ = users
    paths.state_dir.mkdir(mode=0o700)
    os.chown(paths.state_dir, ana.uid, ana.gid)
    assert f"belongs to uid {ana.uid}" in _refusal(_start(paths, initialise=True))


def test_a_link_in_the_state_dir_is_never_followed(paths: DaemonPaths, short_dir: Path) -> None:
    """A link left in a private state dir (holder file, lock) is refused, not written through."""
    secret = short_dir / "root-only.txt"
    secret.write_text(SECRET)
    _initialised(paths)
    for name in ("gpuallocd.holder", "gpuallocd.lock", "ledger.sqlite3-wal"):
        target = paths.state_dir / name
        target.unlink(missing_ok=True)
        target.symlink_to(secret)
        assert "link" in _refusal(_start(paths, initialise=True))
        assert secret.read_text() == SECRET
        target.unlink()


def test_a_socket_dir_writable_by_others_is_refused(paths: DaemonPaths, short_dir: Path) -> None:
    """The socket's directory must not be writable by others either."""
    sockets = short_dir / "run"
    sockets.mkdir()
    os.chmod(sockets, 0o777)
    daemon = ProcessDaemon(paths, default_policy="simple")
    daemon.paths.socket = sockets / "s.sock"
    daemon.start(wait=False)
    assert "socket's directory" in _refusal(daemon)


def test_the_makefile_daemon_target_initialises_on_first_use() -> None:
    """`make daemon` passes --init, so a fresh checkout serves without a manual step."""
    makefile = Path(__file__).resolve().parent.parent / "Makefile"
    daemon_target = makefile.read_text().split("\ndaemon:", 1)[1].split("\n\n", 1)[0]
    assert "--init" in daemon_target


def test_a_symlink_at_the_lock_path_is_refused_and_its_target_kept(
    paths: DaemonPaths, short_dir: Path
) -> None:
    """The state lock (filelock, O_NOFOLLOW): a link planted at gpuallocd.lock stops the
    start with exit 73, and the file it points to is neither created nor written."""
    _initialised(paths)
    secret = short_dir / "root-only.txt"
    secret.write_text(SECRET)
    (paths.state_dir / "gpuallocd.lock").unlink(missing_ok=True)
    (paths.state_dir / "gpuallocd.lock").symlink_to(secret)
    daemon = _start(paths, initialise=True)
    assert "gpuallocd.lock is a symbolic link; refusing to follow it" in _refusal(daemon)
    assert secret.read_text() == SECRET
    dangling = short_dir / "would-be-created"
    (paths.state_dir / "gpuallocd.lock").unlink()
    (paths.state_dir / "gpuallocd.lock").symlink_to(dangling)
    assert "symbolic link" in _refusal(_start(paths, initialise=True))
    assert not dangling.exists()
