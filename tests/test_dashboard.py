"""The dashboard over plain HTTP, its address rule, its charts, the actor of history events
and `gpuallocctl usage --plot` (the browser's view is in test_dashboard_browser.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from xml.etree import ElementTree

import pytest

from gpuallocd.api.tcp_address import parse_host_port
from gpuallocd.charts import (
    BarGroup,
    Interval,
    stacked_bars,
    timeline,
    waiting_bars,
)
from gpuallocd.charts.daily import WAIT_BOUNDS, day_starts
from gpuallocd.daemon.config.machine_checks import config_warnings
from gpuallocd.daemon.config.settings import DaemonConfig
from gpuallocd.dashboard.admission import BUSY, TOO_FAST, FairAdmission, TokenBucket
from gpuallocd.dashboard.source import read_charts
from gpuallocd.errors import ConfigError
from gpuallocd.ledger import LedgerReader
from gpuallocd.model.addresses import is_loopback
from gpuallocd.notify.http_send import Forbidden
from tests.dashboard_scene import free_port
from tests.harness import DaemonPaths, HandClock, ThreadDaemon, ctl_argv, wait_for
from tests.ledger_history import held, open_ledger
from tests.test_daemon_lifecycle import run_daemon_once
from tests.test_usage_per_day import two_days_of_use

SVG = "{http://www.w3.org/2000/svg}"
HOUR = 3600.0
DAY = 24 * HOUR
TIP = re.compile(r"(\d\d-\d\d): (\S+) ([\d.]+) GPU-hours")
DAY_LABEL = re.compile(r"\d\d-\d\d")


def get(url: str, method: str = "GET") -> tuple[int, str]:
    body = None if method in ("GET", "HEAD") else b"{}"
    request = urllib.request.Request(url, method=method, data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def dashboard(start_daemon: Callable[..., ThreadDaemon]) -> tuple[ThreadDaemon, str]:
    port = free_port()
    daemon = start_daemon(default_policy="simple", dashboard_listen=f"127.0.0.1:{port}")
    return daemon, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8423", ("127.0.0.1", 8423)),
        ("[::1]:8423", ("::1", 8423)),
        ("localhost:1", ("localhost", 1)),
        ("10.1.2.3:8423", ("10.1.2.3", 8423)),
    ],
)
def test_dashboard_address_is_host_and_port(text: str, expected: tuple[str, int]) -> None:
    """A named address is taken as it is, a loopback one or another interface's."""
    assert parse_host_port(text, "dashboard_listen", allow_wildcard=False) == expected


@pytest.mark.parametrize(
    "text", ["0.0.0.0:8423", "[::]:8423", ":8423", "*:8423", "127.0.0.1", "h:0", "h:x", "::1:80"]
)
def test_dashboard_address_refuses_every_interface_and_nonsense(text: str) -> None:
    """Listening everywhere is never what the admin meant: name the one address."""
    with pytest.raises(ConfigError):
        parse_host_port(text, "dashboard_listen", allow_wildcard=False)


def test_loopback_is_this_machine_only() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("10.1.2.3") and not is_loopback("example.org")


def test_an_ipv4_mapped_loopback_is_loopback_to_every_judge() -> None:
    """`::ffff:127.0.0.1` is 127.0.0.1: a port set to it draws no warning (it did, while the
    peers of that port counted as loopback), and a webhook to it is refused like one to
    127.0.0.1; `::ffff:10.1.2.3` is no loopback anywhere."""
    assert is_loopback("::ffff:127.0.0.1") and not is_loopback("::ffff:10.1.2.3")
    assert config_warnings(DaemonConfig(dashboard_listen="[::ffff:127.0.0.1]:8423")) == []
    assert config_warnings(DaemonConfig(metrics_listen="[::ffff:10.1.2.3]:9423")) != []
    assert Forbidden(frozenset({("127.0.0.1", 8423)})).refuses("::ffff:127.0.0.2", 8423)


def test_daemon_with_a_wildcard_dashboard_does_not_start(short_dir: Path) -> None:
    """`dashboard_listen = "0.0.0.0:PORT"` stops the start with a config error (exit 78)."""
    result = run_daemon_once(
        short_dir, "--inventory", "example:dgx1-volta", "--dashboard-listen", "0.0.0.0:8423"
    )
    assert result.returncode == 78
    assert "would serve every interface" in result.stderr


def test_first_view_is_the_whole_page(dashboard: tuple[ThreadDaemon, str]) -> None:
    """The server's HTML alone has every GPU row with holder and label, and the charts; the
    script and the style it names are served from the package."""
    daemon, url = dashboard
    with daemon.client() as client:
        client.allocate(gpus=[1], label="<b>exp-1</b>")
    status, page = get(url + "/")
    assert status == 200
    assert page.count('class="gpu ') == 4
    assert "<th>power</th>" not in page  # these GPUs report no power: no column of dashes
    assert "&lt;b&gt;exp-1&lt;/b&gt;" in page and "<b>exp-1" not in page
    assert page.count("<svg") == 4
    assert '<script src="static/dashboard.js"' in page
    assert "://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
    for name in ("dashboard.js", "dashboard.css"):
        assert get(f"{url}/static/{name}")[0] == 200
    assert get(url + "/static/../server.py")[0] == 404


def test_live_parts_follow_the_node(dashboard: tuple[ThreadDaemon, str]) -> None:
    """`/api/live` answers fresh sections: a grant shows at the next poll."""
    daemon, url = dashboard
    before = json.loads(get(url + "/api/live")[1])
    assert "train" not in before["gpus"]
    with daemon.client() as client:
        client.allocate(gpus=[2], label="train")
    after = json.loads(get(url + "/api/live")[1])
    assert "train" in after["gpus"] and "granted" in after["history"]
    assert set(json.loads(get(url + "/api/charts")[1])) == {"charts"}


def test_advance_reservations_are_shown(dashboard: tuple[ThreadDaemon, str]) -> None:
    """A reservation an admin makes shows in its own section: GPUs, for whom, the reason."""
    daemon, url = dashboard
    assert "no advance reservation" in get(url + "/")[1]
    with daemon.client() as client:  # the test daemon's caller is root: an admin
        made = client.reserve(gpus=[3], start_in=3600, duration=7200, user="root", reason="demo")
    live = json.loads(get(url + "/api/live")[1])["reservations"]
    assert made["id"] in live and "GPU 3" in live and "demo" in live
    assert "starts in 59m" in live or "starts in 1h00m" in live  # as the command line writes it


def test_every_write_is_refused(dashboard: tuple[ThreadDaemon, str]) -> None:
    """The dashboard takes no request but GET and HEAD, on any path: 405 and nothing done."""
    daemon, url = dashboard
    for method in ("POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        for path in ("/", "/api/live", "/v1/leases", "/nowhere"):
            assert get(url + path, method)[0] == 405, (method, path)
    assert get(url + "/", "HEAD")[0] == 200
    with daemon.client() as client:
        assert client.leases() == []


def test_page_loads_do_not_hold_up_allocations(dashboard: tuple[ThreadDaemon, str]) -> None:
    """While pages load in a loop, 50 allocate and free pairs all succeed."""
    daemon, url = dashboard
    stop = threading.Event()
    answers: list[int] = []

    def load() -> None:
        while not stop.is_set():
            answers.append(get(url + "/")[0])

    loader = threading.Thread(target=load)
    loader.start()
    try:
        with daemon.client() as client:
            for _ in range(50):
                client.free(client.allocate(1).id)
    finally:
        stop.set()
        loader.join(30)
    assert answers and set(answers) <= {200, 429, 503}


def test_history_events_name_their_actor(dashboard: tuple[ThreadDaemon, str]) -> None:
    """`history --json` and the API give `actor: {uid, user}` and keep `actor_uid`."""
    daemon, _ = dashboard
    with daemon.client() as client:
        client.free(client.allocate(1).id)
        events = client.history()
    assert [e["actor"] for e in events] == [{"uid": 0, "user": "root"}] * 2
    assert [e["actor_uid"] for e in events] == [0, 0]
    shown = subprocess.run(
        ctl_argv(daemon.paths.socket, "--json", "history"), capture_output=True, text=True
    )
    assert json.loads(shown.stdout)["events"][0]["actor"] == {"uid": 0, "user": "root"}


def test_daily_hours_split_leases_at_midnight(tmp_path: Path) -> None:
    """A lease of 2 GPUs from 22:00 to 02:00 counts 4 GPU-hours on each of the two days."""
    midnight = day_starts(1, 1_800_000_000.0)[0]
    ledger, gpus = open_ledger(tmp_path / "ledger.sqlite3")
    held(ledger, gpus, 1000, midnight - 2 * HOUR, midnight + 2 * HOUR, count=2)
    ledger.close()
    reader = LedgerReader(tmp_path / "ledger.sqlite3")
    try:
        data = read_charts(reader, midnight + 10 * HOUR)
    finally:
        reader.close()
    assert [day.get("u1000", 0.0) for day in data.hours[-3:]] == pytest.approx([0.0, 4.0, 4.0])


def test_waiting_buckets_count_requests_by_time_waited(tmp_path: Path) -> None:
    """Each granted request of the last week counts once, in the bucket of how long it
    waited (counted by the ledger); an older one not at all."""
    now = 1_800_000_000.0
    ledger, gpus = open_ledger(tmp_path / "ledger.sqlite3")
    waits = [(1, 0.2), (2, 30.0), (1, 7200.0), (1, 7300.0)]
    for n, (uid, waited) in enumerate(waits):
        held(ledger, gpus, uid, now - HOUR, None if n == 3 else now - 60, first=n, waited=waited)
    held(ledger, gpus, 2, now - 8 * 86400, now - 8 * 86400 + 60, first=5, waited=30.0)
    ledger.close()
    reader = LedgerReader(tmp_path / "ledger.sqlite3")
    try:
        buckets = waiting_bars(reader.waiting_counts(now - 7 * 86400, WAIT_BOUNDS))
    finally:
        reader.close()
    assert [dict(b.values) for b in buckets] == [{"u1": 1}, {"u2": 1}, {}, {}, {"u1": 2}]


def test_bar_chart_is_valid_svg_with_every_user_named() -> None:
    """Well-formed SVG; a bar per user and day with its value in the tooltip; names escaped."""
    groups = [BarGroup("05-01", {"ana": 3.5, "<ben>": 1.0}), BarGroup("05-02", {"ana": 2.0})]
    root = ElementTree.fromstring(stacked_bars(groups, title="t", unit="GPU-hours"))
    tips = [t.text for t in root.iter(f"{SVG}title")]
    assert "05-01: ana 3.50 GPU-hours" in tips and "05-01: <ben> 1.00 GPU-hours" in tips
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "ana" in labels and "<ben>" in labels


def test_usage_plot_writes_the_per_user_chart(
    start_daemon: Callable[..., ThreadDaemon], tmp_path: Path
) -> None:
    """`usage --plot FILE.svg`: a bar per day of the window, each user's GPU-hours in its
    tooltip, adding up to what `usage` reports (2 GPUs for 5 h, then 1 GPU for 3 h)."""
    daemon, _ = two_days_of_use(start_daemon)
    target = tmp_path / "usage.svg"
    shown = subprocess.run(
        ctl_argv(daemon.paths.socket, "usage", "--since", "3d", "--plot", str(target)),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    root = ElementTree.fromstring(target.read_text())
    tips = [m for t in root.iter(f"{SVG}title") if (m := TIP.fullmatch(t.text or ""))]
    assert {m.group(2) for m in tips} == {"root"}
    assert sum(float(m.group(3)) for m in tips) == pytest.approx(13.0, abs=0.02)
    days = {t.text for t in root.iter(f"{SVG}text") if t.text and DAY_LABEL.fullmatch(t.text)}
    assert len(days) >= 3


def test_usage_plot_refuses_other_formats(
    dashboard: tuple[ThreadDaemon, str], tmp_path: Path
) -> None:
    daemon, _ = dashboard
    shown = subprocess.run(
        ctl_argv(daemon.paths.socket, "usage", "--plot", str(tmp_path / "u.pdf")),
        capture_output=True,
        text=True,
    )
    assert shown.returncode != 0 and ".svg or .png" in shown.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="a PNG needs chromium")
def test_usage_plot_draws_a_png_with_chromium(
    dashboard: tuple[ThreadDaemon, str], tmp_path: Path
) -> None:
    daemon, _ = dashboard
    with daemon.client() as client:
        client.allocate(2, label="png")
    target = tmp_path / "usage.png"
    shown = subprocess.run(
        ctl_argv(daemon.paths.socket, "usage", "--since", "2d", "--plot", str(target)),
        capture_output=True,
        text=True,
    )
    assert shown.returncode == 0, shown.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_timeline_draws_a_users_many_short_leases_as_few_bars() -> None:
    """A thousand leases of a few seconds each, back to back: a handful of bars, not a
    thousand rectangles, each telling how many leases it stands for."""
    now = 1_800_000_000.0
    held = [Interval("g0", now - 3600 + i * 3, now - 3600 + i * 3 + 2, "ana") for i in range(1000)]
    root = ElementTree.fromstring(timeline([("GPU 0", held)], now - DAY, now, title="t"))
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert 1 <= len(bars) <= 5
    assert "1000 leases" in "".join(t.text or "" for t in root.iter(f"{SVG}title"))


def test_a_dashboard_on_another_interface_is_warned_about() -> None:
    """Allowed when named, but `doctor` and the start-up log say what it exposes."""
    named = config_warnings(DaemonConfig(dashboard_listen="10.1.2.3:8423"))
    assert any("dashboard_listen" in line and "SSH tunnel" in line for line in named)
    assert config_warnings(DaemonConfig(dashboard_listen="127.0.0.1:8423")) == []


def test_gpus_show_load_memory_unleased_processes_and_mig_instances(
    start_daemon: Callable[..., ThreadDaemon], paths: DaemonPaths
) -> None:
    """On a recorded A100 node: a process outside any lease shows in the section of use
    without a lease with its GPU and owner, the GPU with its load and memory; a leased MIG
    instance shows as a row of its own, with its holder and label."""
    live = paths.root / "live.json"
    live.write_text("{}")
    port = free_port()
    daemon = start_daemon(
        inventory=f"nvml-recording:dgx-a100-mig?live={live}",
        sample_interval_seconds=0.1,
        dashboard_listen=f"127.0.0.1:{port}",
    )
    with daemon.client() as client:
        gpus = client.request("GET", "/v1/gpus")["gpus"]
        whole = next(g for g in gpus if not g["mig_mode"])
        mig = next(g for g in gpus if g["instances"])
        profile = mig["instances"][0]["mig_profile"]
        client.allocate(mig_profile=profile, label="mig-job")
    pid = os.getpid()
    process = {"pid": pid, "used_memory_bytes": 3 * 2**30}
    live.write_text(json.dumps({whole["uuid"]: {"processes": [process]}}))
    url = f"http://127.0.0.1:{port}/api/live"
    row = f'<td>GPU {whole["index"]}</td><td class="who">root</td>'

    def unleased() -> str:
        return str(json.loads(get(url)[1])["unleased"])

    wait_for(lambda: row in unleased() and f"<td>{pid}</td>" in unleased(), timeout=30)
    shown = json.loads(get(url)[1])["gpus"]
    assert "<meter" in shown and " GiB / 80.0 GiB" in shown  # load and memory, sampled
    assert f"MIG {profile}" in shown and "mig-job" in shown


def test_memory_shares_show_under_their_gpu(start_daemon: Callable[..., ThreadDaemon]) -> None:
    """A share of a shared GPU is a row of its own: its size, holder and label."""
    port = free_port()
    daemon = start_daemon(
        inventory="nvml-recording:h200-single",
        shared_gpus=["all"],
        dashboard_listen=f"127.0.0.1:{port}",
    )
    with daemon.client() as client:
        client.allocate(memory_bytes=10 * 2**30, label="share-job")
    shown = json.loads(get(f"http://127.0.0.1:{port}/api/live")[1])["gpus"]
    assert "share 10.0 GiB" in shown and "share-job" in shown
    assert '<span class="holder">root</span>' in shown


def test_pages_past_the_rate_wait_their_turn() -> None:
    """Twenty pages at once, then one per twentieth of a second: a loop of loads takes a
    small fixed share of the daemon, whoever runs it."""
    clock = HandClock(0.0)
    bucket = TokenBucket(20.0, clock)
    assert [bucket.admit() for _ in range(21)] == [True] * 20 + [False]
    clock.step(0.05)
    assert bucket.admit() and not bucket.admit()
    clock.step(10.0)
    assert sum(bucket.admit() for _ in range(30)) == 20


def test_one_client_past_its_share_leaves_the_rate_to_others() -> None:
    """A client admitted past its own share (5 a second) is refused; the shared bucket keeps
    what it did not take, so another client is admitted; loads in flight are capped per
    client (2) and in all (4)."""
    clock = HandClock(0.0)
    admission = FairAdmission(
        rate=20.0, per_client_rate=5.0, in_flight=4, per_client_in_flight=2, clock=clock
    )
    answers = []
    for _ in range(100):
        answers.append(admission.admit("alice"))
        admission.done("alice")
    assert answers == [None] * 5 + [TOO_FAST] * 95
    assert admission.admit("bob") is None and admission.admit("bob") is None
    assert admission.admit("bob") == BUSY  # two of his in flight already
    assert admission.admit("carol") is None and admission.admit("carol") is None
    assert admission.admit("dave") == BUSY  # four in flight in all


def test_unleased_section_escapes_what_users_name() -> None:
    """A process name and a user name are the user's to choose: both are escaped, and the
    GPU model in the summary too."""
    from gpuallocd.dashboard.source import NodeNow
    from gpuallocd.dashboard.summary import summary_html, unleased_html

    gpu = {"index": 0, "name": "<i>GPU</i>", "state": "in-use", "foreign_processes": []}
    node = NodeNow(
        now=1000.0,
        name="n",
        gpus=[gpu],
        labels={},
        queue=[],
        reservations=[],
        unleased=[
            {"pid": 7, "user": "<b>eve</b>", "command": "<img src=x>", "gpu_index": 0, "since": 1.0}
        ],
    )
    shown = unleased_html(node, str) + summary_html(node)
    assert "<img" not in shown and "<b>" not in shown and "<i>" not in shown
    assert "&lt;img src=x&gt;" in shown and "&lt;b&gt;eve&lt;/b&gt;" in shown


def test_failing_notification_channels_are_shown_without_their_address(
    dashboard: tuple[ThreadDaemon, str],
) -> None:
    """A channel whose last delivery failed shows with its user, kind, failures in a row and
    error, the error's URLs and mail addresses blanked and its markup escaped; a channel
    that delivered, and the channel's id (a hash of its target), do not show."""
    from gpuallocd.dashboard.channels import failing_channels_html

    assert "none failing" in failing_channels_html([], 0.0, str)
    daemon, url = dashboard
    error = "<b>sendmail</b> exited with 67: alice@lab.example; see https://x.example/a?t=1"
    with daemon.client() as client:
        client.report_delivery("mail-0a1b2c3d", "mail", False, error)
        client.report_delivery("mail-0a1b2c3d", "mail", False, error)
        client.report_delivery("webhook-5d41402a", "webhook", True)
    page = get(url + "/")[1]
    shown = json.loads(get(url + "/api/live")[1])["channels"]
    assert shown in page
    cells = re.findall(r"<td>(.*?)</td>", shown)
    hidden = "&lt;b&gt;sendmail&lt;/b&gt; exited with 67: [address] see [address]"
    assert cells[:4] == ["root", "mail", "2", hidden]
    assert cells[5] == "never delivered"
    assert "lab.example" not in page and "x.example" not in page and "<b>" not in shown
    assert "0a1b2c3d" not in page and "webhook" not in shown
