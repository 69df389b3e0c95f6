"""Hostile config files: whatever a config file holds, the daemon starts or stops with one
line and exit 78 (ConfigError), never a traceback. The parser is fuzzed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuallocd.daemon.config.loading import load_config
from gpuallocd.daemon.config.settings import settings as setting_table
from gpuallocd.errors import ConfigError
from tests.harness import DEFAULT_INVENTORY

HUGE = "9" * 400

BAD_FILES = {
    "huge integer setting": f"max_connections = {HUGE}\n".encode(),
    "huge integer limit": f"[limits]\nmax_gpus = {HUGE}\n".encode(),
    "huge float setting": f"default_ttl_seconds = {HUGE}.0\n".encode(),
    "infinite float": b"sample_interval_seconds = inf\n",
    "integer past the parser's digits": f"max_connections = {'9' * 5000}\n".encode(),
    "invalid UTF-8": b'socket_group = "\xff\xfe"\n',
    "huge mode": f"socket_mode = {HUGE}\n".encode(),
    "huge integer in a list": f"shared_gpus = [{HUGE}]\n".encode(),
    "a limit table of a number": b"[limits]\ngroup = 5\n",
    "a user table that is a list": b"[limits]\nuser = [1, 2]\n",
}


def run_daemon(config: Path, root: Path) -> subprocess.CompletedProcess[str]:
    """`gpuallocd --config CONFIG` on a bundled topology, stopped after 20 s if it runs."""
    return subprocess.run(
        [
            *("timeout", "-s", "TERM", "20", sys.executable, "-m", "gpuallocd"),
            *("--config", str(config), "--state-dir", str(root / "state")),
            *("--socket", str(root / "s.sock"), "--inventory", DEFAULT_INVENTORY),
        ],
        env={"PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_config_file_stops_the_daemon_with_one_line_and_78(
    name: str, short_dir: Path
) -> None:
    """Each file above: exit 78 and one line on stderr that names the config file."""
    config = short_dir / "gpuallocd.toml"
    config.write_bytes(BAD_FILES[name])
    done = run_daemon(config, short_dir)
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, len(lines)) == (ConfigError.exit_code, 1), done.stderr
    assert lines[0].startswith("gpuallocd: ") and str(config) in lines[0]


KEYS = st.sampled_from([s.name for s in setting_table()] + ["limits", "x"])
SCALARS = st.one_of(
    st.integers(min_value=-(10**500), max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=20).map(lambda t: '"' + t.replace("\\", "").replace('"', "") + '"'),
    st.sampled_from(["true", "false", "[]", "[1, 2]", '["a"]', "{}", "{a = 1}", "inf", "nan"]),
)
TOML_LINES = st.lists(
    st.one_of(
        st.builds(lambda k, v: f"{k} = {v}", KEYS, SCALARS),
        st.sampled_from(["[limits]", "[limits.group.g]", "[limits.user.u]", "[gpuallocd]"]),
        st.builds(
            lambda k, v: f"{k} = {v}",
            st.sampled_from(["max_gpus", "max_waiting", "max_shares", "max_ttl_seconds"]),
            SCALARS,
        ),
    ),
    max_size=8,
)


def _parse(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        load_config(path, environ={})
    except ConfigError as exc:
        assert "\n" not in exc.message


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(lines=TOML_LINES)
def test_fuzzed_toml_reads_or_is_a_config_error(lines: list[str], tmp_path: Path) -> None:
    """Any TOML-like file of settings and limits: read, or ConfigError (one line)."""
    _parse(tmp_path / "fuzz.toml", "\n".join(lines).encode())


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.binary(max_size=200))
def test_fuzzed_bytes_read_or_are_a_config_error(data: bytes, tmp_path: Path) -> None:
    """Any bytes at all: read, or ConfigError (one line)."""
    _parse(tmp_path / "fuzz.toml", data)
