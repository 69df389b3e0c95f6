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
    """ExecStart runs the venv the README's steps create, with the config they install."""
    readme = (ROOT / "README.md").read_text()
    assert f"sudo python3 -m venv {VENV}\n" in readme
    assert f"sudo {VENV}/bin/pip install .\n" in readme
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
