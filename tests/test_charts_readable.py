"""Charts a reader can tell apart and `usage --plot` without tracebacks: colours by rank in
the chart from a palette safe for colour-blind readers, the unit on the axis, a PNG at twice
the pixels, and one clear line (with its exit code) when the file cannot be written."""

from __future__ import annotations

import itertools
import os
import shutil
import struct
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gpuallocd.charts import BarGroup, Interval, stacked_bars, timeline
from gpuallocd.charts.svg import OTHERS, OTHERS_COLOR, PALETTE
from tests.harness import ThreadDaemon, ctl_argv

SVG = "{http://www.w3.org/2000/svg}"
NOW = 1_800_000_000.0
# Names whose CRC-32 fell on the same colour of the old hashed palette.
CLASHING = ("root", "newc_ann", "alice", "bob", "carol")


def _legend(svg: str) -> dict[str, str]:
    """Legend name -> swatch colour (a 10x10 swatch is followed by its name)."""
    root = ElementTree.fromstring(svg)
    items = list(root)
    shown = {}
    for swatch, label in itertools.pairwise(items):
        is_swatch = swatch.tag == f"{SVG}rect" and swatch.get("width") == "10.0"
        if is_swatch and label.tag == f"{SVG}text" and label.text:
            shown[label.text] = swatch.get("fill", "")
    return shown


def test_every_user_of_a_bar_chart_has_a_colour_of_their_own() -> None:
    """Five users, whatever their names: five colours, all from the palette, the user with
    the most GPU-hours first (by rank, not by a hash of the name)."""
    values = {name: float(10 - i) for i, name in enumerate(CLASHING)}
    svg = stacked_bars([BarGroup("05-01", values)], title="t", unit="GPU-hours")
    colours = _legend(svg)
    assert set(colours) == set(CLASHING)
    assert len(set(colours.values())) == len(CLASHING)
    assert [colours[name] for name in CLASHING] == list(PALETTE[: len(CLASHING)])


def test_more_users_than_colours_fold_the_smallest_into_others() -> None:
    """Twelve users: the seven biggest keep a colour each, the rest are one grey "others"
    whose bar is their sum; still no two series of the chart share a colour."""
    values = {f"user{i:02d}": float(100 - i) for i in range(12)}
    svg = stacked_bars([BarGroup("05-01", values)], title="t", unit="GPU-hours")
    colours = _legend(svg)
    assert len(colours) == len(PALETTE) and colours[OTHERS] == OTHERS_COLOR
    assert len(set(colours.values())) == len(colours)
    tips = [t.text or "" for t in ElementTree.fromstring(svg).iter(f"{SVG}title")]
    folded = sum(100.0 - i for i in range(len(PALETTE) - 1, 12))
    assert f"05-01: others {folded:.2f} GPU-hours" in tips


def test_the_value_axis_names_its_unit() -> None:
    svg = stacked_bars([BarGroup("05-01", {"ana": 2.0})], title="t", unit="GPU-hours")
    texts = [t for t in ElementTree.fromstring(svg).iter(f"{SVG}text")]
    assert any(t.text == "GPU-hours" and "rotate(-90" in (t.get("transform") or "") for t in texts)


def test_timeline_colours_users_apart_and_names_them() -> None:
    """The timeline gives each user of the window their own colour and a legend entry."""
    held = [
        Interval("g0", NOW - 3600 * (i + 1), NOW - 3600 * i, name)
        for i, name in enumerate(CLASHING)
    ]
    svg = timeline([("GPU 0", held)], NOW - 86400, NOW, title="t")
    colours = _legend(svg)
    assert set(colours) == set(CLASHING) and len(set(colours.values())) == len(CLASHING)


def test_colours_given_by_the_page_are_kept() -> None:
    """The dashboard hands one mapping to every chart: a user reads the same everywhere."""
    given = {"ana": PALETTE[3], "ben": PALETTE[5]}
    svg = stacked_bars(
        [BarGroup("05-01", {"ana": 1.0, "ben": 5.0})], title="t", unit="h", colors=given
    )
    assert _legend(svg) == given


def _plot(daemon: ThreadDaemon, target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ctl_argv(daemon.paths.socket, "usage", "--since", "2d", "--plot", str(target)),
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_plot_into_a_missing_folder_is_one_line_and_exit_2(
    daemon: ThreadDaemon, tmp_path: Path, suffix: str
) -> None:
    """No traceback: the folder is named as missing, exit 2 (the command line is wrong)."""
    shown = _plot(daemon, tmp_path / "nope" / f"usage{suffix}")
    if suffix == ".png" and shutil.which("chromium") is None:
        pytest.skip("a PNG needs chromium")
    assert shown.returncode == 2, shown.stderr
    assert "Traceback" not in shown.stderr
    assert f"the folder {tmp_path / 'nope'} does not exist" in shown.stderr


def test_plot_into_a_folder_nobody_may_write_is_one_line(daemon: ThreadDaemon) -> None:
    """/sys refuses new files to everyone, root included: permission denied, exit 2."""
    shown = _plot(daemon, Path("/sys/gpuallocd-usage.svg"))
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert "cannot write /sys/gpuallocd-usage.svg: permission denied" in shown.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="a PNG needs chromium")
def test_png_is_drawn_at_twice_the_pixels(daemon: ThreadDaemon, tmp_path: Path) -> None:
    """usage.png: 960x420 CSS pixels at device scale 2, so 1920x840 pixels."""
    with daemon.client() as client:
        client.allocate(2, label="png")
    target = tmp_path / "usage.png"
    shown = _plot(daemon, target)
    assert shown.returncode == 0, shown.stderr
    head = target.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1920, 840)
    shots = os.environ.get("GPUALLOCD_SHOTS")
    if shots:
        shutil.copy(target, Path(shots) / "usage-plot.png")


def test_png_failure_says_the_cause_first(
    daemon: ThreadDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A browser that fails: the message starts with what went wrong, its noise after."""
    fake = tmp_path / "bin" / "chromium"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '[123:ERROR:bus.cc] Failed to connect to dbus' >&2\nexit 21\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    shown = subprocess.run(
        ctl_argv(daemon.paths.socket, "usage", "--plot", str(tmp_path / "u.png")),
        capture_output=True,
        text=True,
        env=env,
    )
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    first = shown.stderr.strip().splitlines()[0]
    assert first.startswith(f"Error: no PNG was drawn: {fake} exited with status 21")
    assert first.index("status 21") < first.index("dbus")


def test_run_with_mig_and_visible_index_is_refused_before_leasing(daemon: ThreadDaemon) -> None:
    """`run --mig 1g.10gb --visible index`: a clear usage error, exit 2, nothing leased."""
    shown = subprocess.run(
        ctl_argv(
            daemon.paths.socket, "run", "--mig", "1g.10gb", "--visible", "index", "--", "true"
        ),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 2 and "Traceback" not in shown.stderr
    assert "--visible index cannot name MIG instances" in shown.stderr
    with daemon.client() as client:
        assert client.leases() == []
