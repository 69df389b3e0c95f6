"""Installing: `pip install .` needs nothing off an index but the dependencies, and the
README's service steps, the unit and `systemd-analyze verify` agree."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "systemd" / "gpuallocd.service"
VENV = "/opt/gpuallocd"


def exec_start() -> str:
    match = re.search(r"^ExecStart=(.+)$", UNIT.read_text(), re.MULTILINE)
    assert match is not None
    return match.group(1)


def test_the_units_execstart_is_where_the_readme_installs() -> None:
    """ExecStart runs the venv the README's steps create, with the config they install; the
    venv is the system Python's, named by its path (pyenv or conda first on root's PATH would
    link it into root's home)."""
    readme = (ROOT / "README.md").read_text()
    assert f"sudo /usr/bin/python3 -m venv {VENV}\n" in readme
    assert (
        f"sudo {VENV}/bin/pip install --force-reinstall {VENV}/wheels/gpuallocd-*.whl\n" in readme
    )
    assert (
        "install -m 644 systemd/gpuallocd.service systemd/gpuallocd.socket /etc/systemd/system/"
        in readme
    )
    assert "install -D -m 644 systemd/gpuallocd.toml /etc/gpuallocd/gpuallocd.toml" in readme
    assert exec_start() == f"{VENV}/bin/gpuallocd --config /etc/gpuallocd/gpuallocd.toml"


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is missing (Debian: apt install systemd)",
)
def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify` passes on the unit, its venv path pointed at this install."""
    installed = Path(sys.prefix) / "bin" / "gpuallocd"
    assert installed.exists(), "gpuallocd is not installed in this environment"
    unit = tmp_path / "gpuallocd.service"
    unit.write_text(UNIT.read_text().replace(f"{VENV}/bin/gpuallocd", str(installed)))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_distribution_carries_the_client_and_needs_no_gpulease_from_an_index(
    tmp_path: Path,
) -> None:
    """The source distribution built from a checkout holds `gpulease` and does not require it
    (pip builds the wheel of `pip install .` from the same package list)."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "gpuallocd", source / "gpuallocd", ignore=ignore)
    shutil.copytree(ROOT / "client" / "gpulease", source / "client" / "gpulease", ignore=ignore)
    out = tmp_path / "dist"
    out.mkdir()
    build = f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", build], cwd=source, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    with tarfile.open(out / done.stdout.strip().splitlines()[-1]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
        info = sdist.extractfile(
            next(m for m in sdist.getmembers() if m.name.endswith("/PKG-INFO"))
        )
        assert info is not None
        metadata = info.read().decode()
    assert {"client/gpulease/__init__.py", "client/gpulease/py.typed"} <= names
    sources = (source / "gpuallocd.egg-info" / "SOURCES.txt").read_text().splitlines()
    assert "client/gpulease/transport.py" in sources
    top_level = (source / "gpuallocd.egg-info" / "top_level.txt").read_text().split()
    assert sorted(top_level) == ["gpuallocd", "gpulease"]
    requires = (source / "gpuallocd.egg-info" / "requires.txt").read_text().splitlines()
    assert "aiohttp>=3.9" in requires and not any("gpulease" in line for line in requires)
    assert "Name: gpuallocd" in metadata


def readme_block(heading: str) -> list[str]:
    """The commands of the first sh block under `heading` in the README, without `sudo`."""
    section = (ROOT / "README.md").read_text().split(heading, 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line.strip().removeprefix("sudo ") for line in block.group(1).splitlines() if line]


def _tree(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


@pytest.mark.skipif(
    subprocess.run(["/usr/bin/python3", "-c", "import venv, ensurepip"]).returncode != 0,
    reason="/usr/bin/python3 has no venv/ensurepip (Debian: apt install python3-venv)",
)
# A venv and two wheels, each built in an isolated environment that pip fills from the index:
# past the suite's 120 s on a loaded two-core machine (seen with the suite on four workers).
@pytest.mark.timeout(300)
def test_the_readmes_build_steps_only_read_the_checkout(tmp_path: Path) -> None:
    """The README's steps up to the wheels, run as written on a copy of the checkout (with
    /opt/gpuallocd under a temporary directory): they leave the checkout exactly as it was
    (no build/, no *.egg-info) and put the daemon's and the client's wheels in wheels/."""
    checkout, prefix = tmp_path / "checkout", tmp_path / "opt"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (checkout / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, checkout / name)
    before = _tree(checkout)
    steps = readme_block("## Running it as a service")
    build = steps[steps.index(f"/usr/bin/python3 -m venv {VENV}") :]
    build = build[
        : next(i for i, s in enumerate(build) if s.startswith(f"{VENV}/bin/pip wheel")) + 1
    ]
    assert len(build) == 5, build
    for step in build:
        done = subprocess.run(
            step.replace(VENV, str(prefix)),
            shell=True,
            cwd=checkout,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (step, done.stderr[-2000:])
    assert _tree(checkout) == before
    wheels = sorted(path.name.split("-")[0] for path in (prefix / "wheels").iterdir())
    assert wheels == ["gpuallocd", "gpulease"]


def test_the_group_steps_match_the_shipped_config_and_the_socket_unit(tmp_path: Path) -> None:
    """ "Only some users": the sed finds both keys in the shipped config (commented out) and
    the result loads with that group and mode 0o660; the drop-in sets the socket unit's group
    and mode; all name the same group."""
    from gpuallocd.daemon.config.loading import load_config

    steps = readme_block("### Only some users")
    group = steps[0].split()[-1]
    assert steps[0] == f"groupadd --system {group}"
    drop_in = next(s for s in steps if "SocketGroup=" in s)
    assert f"SocketGroup={group}" in drop_in and "SocketMode=0660" in drop_in
    assert "/etc/systemd/system/gpuallocd.socket.d/" in drop_in
    edit = next(s for s in steps if s.startswith("sed -i"))
    shipped = (ROOT / "systemd" / "gpuallocd.toml").read_text()
    edited = subprocess.run(
        ["sed", edit.split("'")[1]], input=shipped, capture_output=True, text=True, check=True
    ).stdout
    config_file = tmp_path / "gpuallocd.toml"
    config_file.write_text(edited)
    config = load_config(config_file, environ={})
    assert (config.socket_group, config.socket_mode) == (group, 0o660)


def test_the_shipped_config_sets_nothing() -> None:
    """Every key of systemd/gpuallocd.toml is commented out: the defaults are the code's."""
    shipped = (ROOT / "systemd" / "gpuallocd.toml").read_text().splitlines()
    assert [line for line in shipped if line.strip() and not line.startswith("#")] == []


@pytest.mark.parametrize(
    "project", ["pyproject.toml", "client/pyproject.toml", "contrib/jupyter/pyproject.toml"]
)
def test_no_python_is_refused_for_being_new(project: str) -> None:
    """requires-python has a floor and no ceiling: pip on a Python released after this code
    (3.14, the system Python of current distributions) installs it instead of stopping."""
    text = (ROOT / project).read_text()
    match = re.search(r'^requires-python = "([^"]+)"$', text, re.MULTILINE)
    assert match is not None
    assert match.group(1) == ">=3.10"


def test_the_readme_says_which_pythons_are_tested() -> None:
    """The README names the versions CI runs the tests on, as `.ci/run` runs them, not a range
    it cannot vouch for."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = "the tests of what differs between Pythons on 3.10"
    assert f"Python 3.10 or later; CI runs the whole suite on 3.13 and {said}" in readme
    ci = (ROOT / ".ci" / "run").read_text()
    assert "SUITE_PYTHON=3.13 " in ci and 'OTHER_PYTHONS="3.10"' in ci
