"""`gpuallocctl usage --plot FILE`: GPU-hours per user per day as the dashboard draws them,
written as SVG, or as PNG through a headless Chromium where one is installed (no plotting
library: the chart is the SVG of `gpuallocd.charts`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuallocd.charts import BarGroup, stacked_bars
from gpuallocd.charts.daily import daily_bars
from gpuallocd.cli.looking.plot_file import RefusedPath, write_new_file

if TYPE_CHECKING:
    from gpulease import Client

__all__ = ["unwritable", "write_plot"]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
WIDTH, HEIGHT = 960, 420
SCALE = 2  # device pixels per SVG pixel: sharp on a high-resolution screen and in print
PNG_SECONDS = 60
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _days(client: Client, since: float, now: float, user: str | None) -> list[BarGroup]:
    """One bar a day from the day of `since` to today: each user's GPU-hours that day, in one
    request (the daemon adds them up per day as the dashboard's charts do)."""
    days = client.usage(since=since, until=now, user=user, per_day=True)["days"]
    return daily_bars(
        [day["start"] for day in days],
        [{name: h for name, h in day["gpu_hours"].items() if h} for day in days],
    )


def write_plot(client: Client, path: Path, since: float, user: str | None) -> None:
    """The chart of the days since `since` to `path` (.svg or .png), written without
    following a link there (`plot_file.py`); ClickException where it was refused, OSError
    where the folder cannot be written (`unwritable` says why)."""
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise click.BadParameter("the file must end in .svg or .png", param_hint="--plot")
    now = time.time()
    groups = _days(client, since, now, user)
    first = time.strftime("%Y-%m-%d", time.localtime(since))
    title = (
        f"GPU-hours per user per day, {first} to {time.strftime('%Y-%m-%d', time.localtime(now))}"
    )
    svg = stacked_bars(groups, title=title, unit="GPU-hours", width=WIDTH, height=HEIGHT)
    body = (svg + "\n").encode() if suffix == ".svg" else _png(svg)
    try:
        write_new_file(path, body)
    except RefusedPath as exc:
        raise click.ClickException(str(exc)) from None


def unwritable(path: Path, exc: OSError) -> str:
    """Why the chart could not be written to `path`, and what to do, in one line."""
    folder = path.parent if str(path.parent) else Path(".")
    if isinstance(exc, FileNotFoundError) and not folder.is_dir():
        return f"cannot write {path}: the folder {folder} does not exist (make it first)"
    if isinstance(exc, PermissionError):
        return f"cannot write {path}: permission denied (choose a folder you can write)"
    return f"cannot write {path}: {exc.strerror or exc}"


def _png(svg: str) -> bytes:
    """Chromium's own screenshot of the SVG, in a fresh profile, nothing fetched; drawn in
    a private directory of ours, never at the user's path."""
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if browser is None:
        raise click.ClickException(
            "a PNG is drawn by a headless Chromium, and none is installed (apt-get install "
            "chromium); write an .svg instead, which needs nothing"
        )
    with tempfile.TemporaryDirectory(prefix="gpuallocctl-plot-") as work:
        source = Path(work, "chart.svg")
        source.write_text(svg)
        shot = Path(work, "chart.png")  # written here, then copied: a failure is ours to name
        argv = [
            browser,
            "--headless",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={Path(work, 'profile')}",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--force-device-scale-factor={SCALE}",
            f"--screenshot={shot}",
            source.as_uri(),
        ]
        if os.geteuid() == 0:  # Chromium refuses root without it; the page is our own SVG
            argv.insert(1, "--no-sandbox")
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=PNG_SECONDS, check=False
        )
        drawn = shot.read_bytes() if shot.is_file() else b""
    if done.returncode != 0 or not drawn.startswith(PNG_MAGIC):
        raise click.ClickException(_failed(browser, done))
    return drawn


def _failed(browser: str, done: subprocess.CompletedProcess[str]) -> str:
    """The cause first (no PNG, the browser's status), then the end of what it said."""
    said = " | ".join(line for line in done.stderr.strip().splitlines()[-3:] if line.strip())
    why = f"no PNG was drawn: {browser} exited with status {done.returncode}"
    if done.returncode == 0:
        why += " but drew no PNG"
    return why + "; nothing was written" + (f" (its last words: {said[-300:]})" if said else "")
