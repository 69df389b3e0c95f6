"""contrib/docker: the wrapper's arguments, and a lease that lives exactly as long as the container.

The lifecycle tests run the real wrapper and its supervisor against a real daemon, with a
stand-in container runtime (`fake_runtime.py`) in place of `docker`.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.harness import ThreadDaemon, wait_for

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "contrib" / "docker" / "gpuallocd_docker.py"


def _load_wrapper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuallocd_docker", WRAPPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docker = _load_wrapper()
LEASE = {
    "id": "3f9c2a1b7d40",
    "gpus": [{"index": 0, "uuid": "GPU-a"}, {"index": 2, "uuid": "GPU-b"}],
}


@pytest.fixture
def runtime(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in runtime as an executable; its state folder is short_dir/runtime."""
    state = short_dir / "runtime"
    (state / "containers").mkdir(parents=True)
    monkeypatch.setenv("FAKE_RUNTIME_DIR", str(state))
    shim = short_dir / "docker"
    fake = Path(__file__).with_name("fake_runtime.py")
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} {fake} "$@"\n')
    shim.chmod(0o755)
    return shim


def containers(runtime: Path) -> list[Path]:
    return sorted((runtime.parent / "runtime" / "containers").iterdir())


def exit_with(container: Path, status: int) -> None:
    """End a container with `status`: its `exit` file appears whole (renamed into place), so
    the runtime never reads it half written (empty, which it would take for 0)."""
    (container / "exit.tmp").write_text(str(status))
    (container / "exit.tmp").rename(container / "exit")


def calls(runtime: Path) -> list[list[str]]:
    text = (runtime.parent / "runtime" / "calls.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def wrapper(daemon: ThreadDaemon, runtime: Path, *args: str) -> list[str]:
    head = [sys.executable, str(WRAPPER), "--socket", str(daemon.paths.socket)]
    return [*head, "--runtime", str(runtime), *args]


def test_docker_mode_passes_uuids_in_one_quoted_gpus_field() -> None:
    """`gpus` mode gives `--gpus "device=U1,U2"`, quoted so Docker keeps the commas."""
    assert docker.device_args("gpus", "L", ["GPU-a", "GPU-b"]) == [
        "--gpus",
        '"device=GPU-a,GPU-b"',
    ]


def test_cdi_modes_name_nvidia_devices_by_uuid_or_the_lease_by_id() -> None:
    """`cdi` asks for nvidia.com/gpu=UUID per GPU; `cdi-lease` for gpuallocd.io/lease=ID."""
    assert docker.device_args("cdi", "L", ["GPU-a", "GPU-b"]) == [
        "--device",
        "nvidia.com/gpu=GPU-a",
        "--device",
        "nvidia.com/gpu=GPU-b",
    ]
    assert docker.device_args("cdi-lease", "L1", ["GPU-a"]) == ["--device", "gpuallocd.io/lease=L1"]


def test_run_command_puts_the_lease_before_the_users_arguments() -> None:
    """cidfile, label, env and devices come first; the user's arguments follow untouched."""
    command = docker.run_command("docker", "gpus", LEASE, "/t/cid", ["-d", "img", "--x"])
    assert command == [
        "docker",
        "run",
        "--cidfile",
        "/t/cid",
        "--label",
        "io.gpuallocd.lease=3f9c2a1b7d40",
        "--env",
        "GPUALLOCD_LEASE_ID=3f9c2a1b7d40",
        "--gpus",
        '"device=GPU-a,GPU-b"',
        "-d",
        "img",
        "--x",
    ]


def test_the_users_own_cidfile_is_used_not_replaced() -> None:
    """A `--cidfile` among the user's arguments is the one watched; no second is added."""
    run_args = ["--cidfile=/mine/cid", "img"]
    assert docker.user_cidfile(run_args) == "/mine/cid"
    assert docker.user_cidfile(["img", "--", "--cidfile", "x"]) is None
    command = docker.run_command("podman", "cdi", LEASE, "/mine/cid", run_args)
    assert command.count("--cidfile") == 0 and "--cidfile=/mine/cid" in command


def test_podman_defaults_to_cdi_and_docker_to_gpus() -> None:
    """The device mode follows the runtime's name unless --devices says otherwise."""
    assert docker.default_mode("/usr/bin/docker") == "gpus"
    assert docker.default_mode("podman") == "cdi"


def test_detached_container_keeps_its_lease_after_the_cli_exits(
    daemon: ThreadDaemon, runtime: Path
) -> None:
    """Under -d the CLI exits at once; the lease lives until the container exits, then ends."""
    done = subprocess.run(
        wrapper(daemon, runtime, "-n", "2", "--label", "web", "run", "-d", "img"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cid = done.stdout.strip()
    with daemon.client() as client:
        (lease,) = client.leases()
        assert lease.label == "web" and len(lease.gpus) == 2
        run_call = calls(runtime)[0]
        assert f'"device={",".join(lease.uuids)}"' in run_call
        assert f"io.gpuallocd.lease={lease.id}" in run_call
        wait_for(lambda: ["wait", cid] in calls(runtime), 20, what="the supervisor to wait")
        assert client.lease(lease.id).state == "active"
        exit_with(containers(runtime)[0], 0)
        wait_for(lambda: client.leases() == [], 20, what="the lease to end")
        assert client.lease(lease.id).state == "freed"


def test_foreground_run_passes_the_exit_status_and_frees_the_lease(
    daemon: ThreadDaemon, runtime: Path
) -> None:
    """Without -d the wrapper returns the container's status; the lease ends with it."""
    process = subprocess.Popen(wrapper(daemon, runtime, "run", "img"), text=True)
    try:
        wait_for(lambda: bool(containers(runtime)), 20, what="the container to start")
        with daemon.client() as client:
            (lease,) = client.leases()
            assert len(lease.gpus) == 1
            exit_with(containers(runtime)[0], 3)
            assert process.wait(60) == 3
            wait_for(lambda: client.leases() == [], 20, what="the lease to end")
    finally:
        process.kill()
        process.wait()


def test_a_container_that_never_starts_frees_the_lease(daemon: ThreadDaemon, runtime: Path) -> None:
    """When `run` fails (no container), the runtime's status comes back and nothing stays leased."""
    done = subprocess.run(
        wrapper(daemon, runtime, "-n", "4", "run", "-d", "bad-image"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 125
    with daemon.client() as client:
        wait_for(lambda: client.leases() == [], 20, what="the lease to end")
        assert [e["event"] for e in client.history()] == ["granted", "freed"]


def test_no_free_gpus_means_no_container(daemon: ThreadDaemon, runtime: Path) -> None:
    """A lease that cannot be granted fails the wrapper before the runtime is called."""
    with daemon.client() as client:
        client.allocate(4, label="someone")
        done = subprocess.run(
            wrapper(daemon, runtime, "-n", "1", "run", "-d", "img"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert "gpuallocd-docker:" in done.stderr
    assert not (runtime.parent / "runtime" / "calls.jsonl").exists()
