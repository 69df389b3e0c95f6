"""The dashboard in a real headless browser (Debian's chromium driven by Playwright): what a
person sees, that it follows the node without a reload, that it takes no writes, and that it
is complete with JavaScript off. The screenshot of docs/dashboard.md comes from here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard_scene import Scene, busy_node, free_port
from tests.harness import DaemonPaths, ThreadDaemon, wait_for
from tests.local_users import LocalUser

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "dashboard.png"
# Set to refresh docs/dashboard.png; otherwise the screenshot goes to a temporary file.
UPDATE_SCREENSHOT = "GPUALLOCD_UPDATE_SCREENSHOT"

pytestmark = pytest.mark.skipif(
    not os.access(CHROMIUM, os.X_OK), reason="needs Debian's chromium (apt-get install chromium)"
)


@pytest.fixture(scope="module")
def scene(users: tuple[LocalUser, LocalUser]) -> Iterator[Scene]:
    with busy_node(*users) as found:
        yield found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Chromium, headless, in a fresh profile of its own (Playwright makes a new
    --user-data-dir for each launch and removes it after)."""
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(
            executable_path=CHROMIUM, headless=True, chromium_sandbox=False, args=FLAGS
        )
        yield launched
        launched.close()


def _page(browser: Any, javascript: bool = True) -> Any:
    context = browser.new_context(
        viewport={"width": 1100, "height": 900}, java_script_enabled=javascript
    )
    return context.new_page()


def test_page_shows_gpus_holders_labels_queue_and_charts(scene: Scene, browser: Any) -> None:
    """Four GPU rows, ana holding GPUs 0 and 1 with her label, ben waiting with a reason and
    an estimate, the recent history, and the four charts drawn as SVG."""
    page = _page(browser)
    page.goto(scene.url + "/")
    gpus = page.locator("#gpus tr.gpu")
    assert gpus.count() == 4
    first = gpus.nth(0)
    assert first.locator(".holder").inner_text() == scene.ana.name
    assert first.locator(".label").inner_text() == "llm-pretrain"
    assert "leased" in first.inner_text()
    waiter = page.locator("#queue tr.waiter")
    assert waiter.count() == 1
    assert scene.ben.name in waiter.inner_text()
    assert "eval-sweep" in waiter.inner_text()
    assert "Resources" in waiter.inner_text() or "Reserved" in waiter.inner_text()
    assert waiter.locator("td").nth(6).inner_text().startswith("in ")  # the estimated start
    reservation = page.locator("#reservations tr.reservation")
    assert reservation.count() == 1
    assert scene.ben.name in reservation.inner_text()
    assert "demo for the review" in reservation.inner_text()
    assert page.locator("#history tr.event-revoked").count() >= 1
    for chart in ("usage-7d", "usage-30d", "timeline", "waiting"):
        assert page.locator(f"#chart-{chart} svg rect").count() > 1, chart
    assert page.locator(f"#chart-usage-7d svg text:text('{scene.ben.name}')").count() == 1
    page.context.close()


def test_page_follows_a_grant_without_reloading(scene: Scene, browser: Any) -> None:
    """A lease granted after the page loaded shows up in place: same document, new holder."""
    page = _page(browser)
    page.goto(scene.url + "/")
    page.evaluate("window.loadedOnce = true")
    assert page.locator("#gpus .label:text('live-grant')").count() == 0
    with scene.daemon.client() as root:
        lease = root.allocate(gpus=[3], label="live-grant")
    try:
        page.locator("#gpus .label:text('live-grant')").wait_for(timeout=15_000)
        assert page.evaluate("window.loadedOnce") is True  # not reloaded
        row = page.locator("#gpus tr.gpu").nth(3)
        assert row.locator(".holder").inner_text() == "root"
        _screenshot(page)
    finally:
        with scene.daemon.client() as root:
            root.free(lease.id)
    page.context.close()


def _screenshot(page: Any) -> None:
    target = SCREENSHOT if os.environ.get(UPDATE_SCREENSHOT) else Path(tempfile.mktemp(".png"))
    page.screenshot(path=str(target), full_page=True)
    assert target.stat().st_size < 300 * 1024
    if target != SCREENSHOT:
        target.unlink()


def test_browser_writes_are_refused(scene: Scene, browser: Any) -> None:
    """POST, PUT, PATCH and DELETE, from the page's own script and from outside: 405."""
    page = _page(browser)
    page.goto(scene.url + "/")
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        status = page.evaluate(
            f"fetch('api/live', {{method: '{method}', body: 'x'}}).then(r => r.status)"
        )
        assert status == 405, method
    assert page.request.post(scene.url + "/v1/leases", data="{}").status == 405
    assert page.request.delete(scene.url + "/").status == 405
    page.context.close()


def test_first_view_is_complete_without_javascript(scene: Scene, browser: Any) -> None:
    """With JavaScript off the server's page alone has the GPUs, holders, labels, the queue,
    the history and the charts; it asks the browser to reload itself now and then."""
    page = _page(browser, javascript=False)
    page.goto(scene.url + "/")
    assert page.locator("#gpus tr.gpu").count() == 4
    assert page.locator("#gpus .holder").first.inner_text() == scene.ana.name
    assert page.locator("#gpus .label").first.inner_text() == "llm-pretrain"
    assert page.locator("#queue tr.waiter").count() == 1
    assert page.locator("#history tr.event").count() > 0
    assert page.locator("figure.chart svg").count() == 4
    assert page.locator("noscript").count() == 1
    page.context.close()


def test_page_follows_the_queue_being_served(
    users: tuple[LocalUser, LocalUser], browser: Any
) -> None:
    """ana's lease revoked: ben, who waited for GPU 0, is granted it; the open page shows him
    as its holder and an empty queue, without a reload."""
    with busy_node(*users, days=0) as fresh:
        page = _page(browser)
        page.goto(fresh.url + "/")
        page.evaluate("window.loadedOnce = true")
        assert page.locator("#queue tr.waiter").count() == 1
        with fresh.daemon.client() as root:
            (held,) = [lease for lease in root.leases() if lease.user == fresh.ana.name]
            root.revoke(held.id, reason="make room")
        first = page.locator("#gpus tr.gpu").nth(0)
        first.locator(f".holder:text('{fresh.ben.name}')").wait_for(timeout=15_000)
        assert first.locator(".label").inner_text() == "eval-sweep"
        assert page.locator("#queue tr.waiter").count() == 0
        assert page.evaluate("window.loadedOnce") is True
        page.context.close()


@pytest.fixture
def watched_node(users: tuple[LocalUser, LocalUser]) -> Iterator[tuple[Any, LocalUser, int, str]]:
    """The recorded DGX A100 with a dashboard: ana's `sleep` runs on GPU 2 without a lease,
    root leases GPU 1, and a reservation for ana holds GPU 5 now. (daemon, ana, pid, id)"""
    ana = users[0]
    root_dir = Path(tempfile.mkdtemp(prefix="gw-", dir="/tmp"))
    root_dir.chmod(0o755)
    live = root_dir / "live.json"
    live.write_text("{}")
    port = free_port()
    daemon = ThreadDaemon(
        DaemonPaths(root_dir),
        inventory=f"nvml-recording:dgx-a100-mig?live={live}",
        default_policy="simple",
        sample_interval_seconds=0.1,
        dashboard_listen=f"127.0.0.1:{port}",
    ).start()
    sleeper = subprocess.Popen(["sleep", "600"], user=ana.uid, group=ana.gid, extra_groups=[])
    try:
        with daemon.client() as client:
            uuids = {g.index: g.uuid for g in client.status()}
        live.write_text(json.dumps({uuids[2]: {"processes": [{"pid": sleeper.pid}]}}))
        with daemon.client() as root:
            root.allocate(gpus=[1], label="llm-pretrain", ttl=8 * 3600)
            made = root.reserve(gpus=[5], start_in=0, duration=7200, user=ana.name, reason="demo")

            def seen() -> bool:
                offenders = root.unleased()["processes"]
                return any(p["pid"] == sleeper.pid for p in offenders)

            wait_for(seen, timeout=30, what="the unleased process")
        daemon.url = f"http://127.0.0.1:{port}"  # type: ignore[attr-defined]
        yield daemon, ana, sleeper.pid, made["id"]
    finally:
        sleeper.kill()
        sleeper.wait(10)
        daemon.stop()
        shutil.rmtree(root_dir, ignore_errors=True)


def test_page_reads_at_a_glance(
    watched_node: tuple[Any, LocalUser, int, str], browser: Any
) -> None:
    """A summary line at the top; use without a lease first, with who, which process and
    since when; the GPU model named once, not on every row; a reserved GPU names its
    reservation; the charts start above the fold, the usage chart's axis in GPU-hours."""
    daemon, ana, pid, reservation = watched_node
    page = _page(browser)
    page.goto(daemon.url + "/")
    summary = page.locator("#summary").inner_text()
    assert summary.startswith("8 GPUs (8 \u00d7 NVIDIA A100-SXM4-80GB): ")
    assert "1 leased" in summary and "used without a lease" in summary and "1 reserved" in summary
    row = page.locator("#unleased tr.unleased", has_text=f"{pid}")
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[:4] == ["GPU 2", ana.name, "sleep", str(pid)] and "ago" in cells[4]
    first_section = page.locator("main section").first
    assert first_section.get_attribute("id") == "section-unleased"
    assert "A100" not in page.locator("#gpus").inner_text()
    reserved = page.locator("#gpus tr.gpu").nth(5).inner_text()
    assert f"reservation {reservation} ({ana.name})" in reserved
    chart = page.locator("#chart-usage-7d").bounding_box()
    assert chart is not None and chart["y"] < 900  # the viewport's height
    unit = page.locator("#chart-usage-7d svg text", has_text="GPU-hours")
    assert unit.count() >= 1
    shots = os.environ.get("GPUALLOCD_SHOTS")
    if shots:
        page.screenshot(path=str(Path(shots) / "dashboard.png"), full_page=True)
    page.context.close()
