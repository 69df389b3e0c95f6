"""The client talks only to a server run by root, by its own user, or by a user it was told of."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpulease import Client, DaemonUnavailable, UntrustedServer

from tests.harness import ThreadDaemon
from tests.unix_servers import run_as_user


@pytest.fixture(scope="module")
def other_user() -> Iterator[pwd.struct_passwd]:
    """A real user, neither root nor the test's own, made with useradd and removed after."""
    if os.geteuid() != 0:
        pytest.skip("making a user and running a server as that user needs root")
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd and userdel are not installed")
    name = f"gpuallocd-t{os.getpid()}"
    subprocess.run(["userdel", name], capture_output=True)  # left by a killed run of this pid
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", name], check=True
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=True)


@pytest.fixture
def foreign(
    other_user: pwd.struct_passwd, short_dir: Path
) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A server run as `other_user`: its socket path and its process (which reports on stdout)."""
    socket_dir = short_dir / "foreign"
    socket_dir.mkdir()
    process, path = run_as_user(socket_dir, other_user.pw_uid, other_user.pw_gid)
    yield path, process
    process.kill()
    process.wait()
    if process.stdout is not None:
        process.stdout.close()


def next_report(process: subprocess.Popen[str]) -> dict[str, object]:
    assert process.stdout is not None
    report: dict[str, object] = json.loads(process.stdout.readline())
    return report


def test_server_of_another_user_is_refused_before_anything_is_sent(
    foreign: tuple[Path, subprocess.Popen[str]], other_user: pwd.struct_passwd
) -> None:
    """UntrustedServer names the socket, the server's user and how to allow it; no byte leaves."""
    path, process = foreign
    with Client(path) as client, pytest.raises(UntrustedServer) as raised:
        client.allocate(1, label="secret-label")
    message = raised.value.message
    assert str(path) in message
    assert f"{other_user.pw_name} (uid {other_user.pw_uid})" in message
    assert f"GPUALLOCD_SERVER_UID={other_user.pw_name}" in message
    assert isinstance(raised.value, DaemonUnavailable)
    assert raised.value.code == "untrusted_server"
    assert next_report(process) == {"received": 0, "request_line": ""}


def test_server_of_a_user_named_in_the_environment_is_trusted(
    foreign: tuple[Path, subprocess.Popen[str]], other_user: pwd.struct_passwd
) -> None:
    """GPUALLOCD_SERVER_UID lists uids and user names; a server run by one of them is used."""
    path, process = foreign
    os.environ["GPUALLOCD_SERVER_UID"] = f"4242, {other_user.pw_name}"
    with Client(path) as client:
        assert client.health() == {"served_by_uid": other_user.pw_uid}
    assert next_report(process)["request_line"] == "GET /v1/health HTTP/1.1"


def test_server_uid_argument_trusts_a_uid_instead_of_the_environment(
    foreign: tuple[Path, subprocess.Popen[str]], other_user: pwd.struct_passwd
) -> None:
    """Client(server_uid=...) takes precedence over GPUALLOCD_SERVER_UID."""
    path, _ = foreign
    os.environ["GPUALLOCD_SERVER_UID"] = "4242"
    with Client(path, server_uid=[other_user.pw_uid]) as client:
        assert client.health() == {"served_by_uid": other_user.pw_uid}
    with Client(path) as client, pytest.raises(UntrustedServer):
        client.health()


def test_daemon_run_by_root_or_by_the_caller_needs_no_setting(daemon: ThreadDaemon) -> None:
    """The test's own daemon (root, or the caller's user) is trusted with nothing configured."""
    with daemon.client() as client:
        assert client.health()


def test_unknown_user_in_the_setting_is_an_error() -> None:
    """A user name that does not exist is a ValueError naming the setting, not silently skipped."""
    os.environ["GPUALLOCD_SERVER_UID"] = "no-such-user-gpuallocd"
    with pytest.raises(ValueError, match=r"\$GPUALLOCD_SERVER_UID: no user is named"):
        Client()
    with pytest.raises(ValueError, match="server_uid: no user is named"):
        Client(server_uid="no-such-user-gpuallocd")
