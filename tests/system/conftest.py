"""The service as it ships, under a real systemd: one container booted for the whole suite,
the project installed exactly as the README's service section says.

Only what a box without a GPU lacks is added, in one drop-in (`TEST_DROP_IN`): the recorded
DGX A100 stands in for NVML, told by a file which real processes use which GPU. Everything
else (the unit, its sandbox and capabilities, the socket unit, the config file) is as shipped.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from tests.system.container import Box, build_root, nspawn_problem, wheelhouse

REPO = Path(__file__).resolve().parents[2]
SOURCE = "/root/gpuallocd"  # where the checkout is inside, as an admin would clone it
WHEELS = "/var/cache/wheels"
LIVE = "/run/gpuallocd-test/live.json"
USERS = ("alice", "bob")


FINDINGS: dict[str, str] = {}  # what each check saw, printed at the end of the run


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FINDINGS:
        terminalreporter.section("what the system checks saw")
        for key, value in FINDINGS.items():
            terminalreporter.write_line(f"{key}: {value}")


# The first check builds the cached container (debootstrap, wheels, the README's install):
# about a minute on an idle machine, several on a loaded one with a cold cache. Each check
# bounds its own waits; this only keeps the suite's 120 s default from cutting the build.
BUILD_SECONDS = 1500


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/system/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.system)
            item.add_marker(pytest.mark.timeout(BUILD_SECONDS))


def readme_service_commands() -> list[str]:
    """The commands of the README's "Running it as a service" block, without `sudo`."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Running it as a service", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "the README's service section has no ```sh block"
    lines = [line.strip() for line in block.group(1).splitlines() if line.strip()]
    return [line.removeprefix("sudo ") for line in lines]


def _requirements() -> list[str]:
    """The project's dependencies and build backend, for the offline wheelhouse."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = [*project["build-system"]["requires"], "wheel"]
    for requirement in project["project"]["dependencies"]:
        if "python_version<'3.11'" not in requirement.replace(" ", ""):
            wanted.append(requirement)
    return wanted


def _copy_checkout(target: Path) -> None:
    """The working tree as git sees it (tracked, and new files not ignored)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def site_drop_in(metrics_port: int) -> str:
    return f"""[Service]
# This box has no GPU: the recorded DGX A100 stands in for NVML, told by a file which real
# processes use which GPU (docs/hardware.md). The rest is a site's config, in the environment
# so that the README's steps (which install the shipped config file) stay as they are.
Environment=GPUALLOCD_INVENTORY=nvml-recording:dgx-a100-mig?live={LIVE}
Environment=GPUALLOCD_SHARED_GPUS=all
Environment=GPUALLOCD_SHARE_ENFORCEMENT=kill
Environment=GPUALLOCD_SAMPLE_INTERVAL_SECONDS=0.5
Environment=GPUALLOCD_REVOKE_GRACE_SECONDS=5
Environment=GPUALLOCD_METRICS_LISTEN=127.0.0.1:{metrics_port}
"""


@dataclass
class Installed:
    """The booted box, what the install printed, and when the service came up."""

    box: Box
    install_output: list[tuple[str, int, str]]
    metrics_port: int
    timings: dict[str, float] = field(default_factory=dict)


def _prepare(box: Box, metrics_port: int) -> None:
    box.sh(f"printf '[global]\\nno-index = true\\nfind-links = {WHEELS}\\n' > /etc/pip.conf")
    box.sh(f"mkdir -p /etc/systemd/system/gpuallocd.service.d {os.path.dirname(LIVE)}")
    box.run(
        ["sh", "-c", "cat > /etc/systemd/system/gpuallocd.service.d/system-test.conf"],
        input=site_drop_in(metrics_port),
    )
    box.sh(f"echo '{{}}' > {LIVE}")
    for user in USERS:
        box.run(["useradd", "--create-home", "--shell", "/bin/sh", user])


def _install(box: Box) -> list[tuple[str, int, str]]:
    done = []
    for command in readme_service_commands():
        result = box.sh(f"cd {SOURCE} && {command}", timeout=600)
        done.append((command, result.returncode, result.stdout + result.stderr))
        if result.returncode != 0:
            break
    return done


@pytest.fixture(scope="session")
def installed() -> Iterator[Installed]:
    problem = nspawn_problem()
    if problem is not None:
        pytest.skip(f"no system test: {problem}")
    timings: dict[str, float] = {}
    started = time.monotonic()
    root = build_root()
    wheels = wheelhouse(_requirements())
    timings["build"] = time.monotonic() - started
    checkout = Path(tempfile.mkdtemp(prefix="ga-src-"))
    _copy_checkout(checkout)
    log = checkout.parent / f"{checkout.name}.nspawn.log"
    name = f"gpuallocd-test-{secrets.token_hex(3)}"
    started = time.monotonic()
    box = Box(root, name, [(checkout, SOURCE, False), (wheels, WHEELS, True)], log)
    timings["boot"] = time.monotonic() - started
    try:
        port = _free_port()
        _prepare(box, port)
        started = time.monotonic()
        output = _install(box)
        timings["install"] = time.monotonic() - started
        FINDINGS.update({f"{k} seconds": f"{v:.1f}" for k, v in timings.items()})
        yield Installed(box, output, port, timings)
    finally:
        journal = box.run(["journalctl", "--no-pager", "-o", "short-monotonic"], timeout=60)
        saved = checkout.parent / f"{checkout.name}.journal"
        saved.write_text(journal.stdout)
        FINDINGS["the container's journal"] = str(saved)
        box.stop()
        shutil.rmtree(checkout, ignore_errors=True)


@pytest.fixture(scope="session")
def box(installed: Installed) -> Box:
    return installed.box
