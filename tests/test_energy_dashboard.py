"""The dashboard's energy and power: a chart of kWh per user per day, each user's kWh and
cost beside GPU-hours, each GPU's draw and cap, and the power budget's gauge."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuallocd.dashboard.charts import charts_html
from gpuallocd.dashboard.sections import power_html
from gpuallocd.dashboard.source import NodeNow
from gpuallocd.dashboard.usage import usage_table
from gpuallocd.ledger import Ledger
from gpuallocd.model.energy import EnergyPrice, EnergyUse
from tests.dashboard_scene import free_port
from tests.harness import DaemonPaths, wait_for
from tests.test_dashboard import get
from tests.test_energy_leases import Machine


def _node(now: float, power: dict[str, float | str | None] | None = None) -> NodeNow:
    return NodeNow(now, "node", [], {}, [], [], power)


def test_the_chart_of_kwh_per_user_per_day_shows_where_energy_was_read(tmp_path: Path) -> None:
    """Readings of two users over two days make a kWh chart; a node without readings has
    none (no empty chart)."""
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    now = time.time()
    reader = ledger.reader()
    try:
        assert "chart-energy-30d" not in charts_html(reader, _node(now))
        ledger.record_energy(
            [
                EnergyUse("L1", 1000, "alice", now - 86400, 3.6e6, False),
                EnergyUse("L2", 1001, "bob<b>", now - 60, 1.8e6, True),
            ]
        )
        html = charts_html(reader, _node(now))
        assert 'id="chart-energy-30d"' in html and "kWh per user, 30 days" in html
        assert "alice" in html and "bob&lt;b&gt;" in html and "bob<b>" not in html
    finally:
        reader.close()
        ledger.close()


def test_the_power_line_says_committed_and_drawn_watts() -> None:
    """Under the GPUs: committed of the budget, and drawn; nothing where there is no power."""
    power = {"budget_watts": 1600.0, "committed_watts": 1450.0, "drawn_watts": 900.0}
    assert power_html(_node(0.0, power)).endswith(
        "power: 1,450 of 1,600 W committed, 900 W drawn</p>"
    )
    unbudgeted = {"budget_watts": None, "committed_watts": 1450.0, "drawn_watts": 900.0}
    assert power_html(_node(0.0, unbudgeted)) == (
        '<p class="power">power: 1,450 W committed, 900 W drawn</p>'
    )
    assert power_html(_node(0.0)) == ""


BUDGET_W = 3000  # over the recorded DGX-1's 8 x 300 W (every GPU draws its limit here)
PRICE = 0.5


@pytest.fixture
def node(short_dir: Path, paths: DaemonPaths) -> Iterator[tuple[Machine, str]]:
    """The recorded DGX-1 (V100s at full load draw their limit) with a power budget, a price
    of energy and the dashboard on."""
    port = free_port()
    machine = Machine(
        paths,
        energy_interval_seconds=0.05,
        dashboard_listen=f"127.0.0.1:{port}",
        power_budget_watts=BUDGET_W,
        energy_price_per_kwh=PRICE,
        energy_currency="EUR",
    )
    machine.daemon.start()
    yield machine, f"http://127.0.0.1:{port}"
    machine.daemon.stop()


def live(url: str) -> dict[str, Any]:
    """`/api/live`'s parts; polled past the dashboard's 5 a second per client, a 429 (its
    answer to a client too fast) is waited out."""
    answer: list[str] = []

    def answered() -> bool:
        status, body = get(url + "/api/live")
        answer[:] = [body]
        return status == 200

    wait_for(answered, 30, interval=0.25, what="the dashboard's answer")
    return dict(json.loads(answer[0]))


def test_each_gpu_shows_its_draw_and_cap_and_the_budget_its_gauge(
    node: tuple[Machine, str],
) -> None:
    """A GPU capped at 200 W for a lease reads `200/200 W` in its row (draw of cap, as
    `status` says it), a free one `?/300 W` or its draw of 300 W; the budget is a gauge of
    the committed watts `GET /v1/gpus` gives (those `queue` and `doctor` use)."""
    machine, url = node
    with machine.daemon.client() as client:
        lease = client.allocate(1, power_limit_watts=200, label="capped")
        index = lease.gpus[0].index

        def capped_row() -> bool:
            row = _gpu_row(live(url)["gpus"], index)
            return "<td>200/200 W</td>" in row

        wait_for(capped_row, 30, interval=0.25, what="the cap read back in the GPU's row")
        power = client.request("GET", "/v1/gpus")["power"]
    shown = live(url)["gpus"]
    others = [_gpu_row(shown, i) for i in range(8) if i != index]
    assert all("/300 W</td>" in row for row in others)
    assert 'class="power-budget"' in shown and f'max="{BUDGET_W}"' in shown
    committed = f'value="{power["committed_watts"]:.0f}"'
    assert committed in shown and f"of {BUDGET_W:,} W committed" in shown


def _gpu_row(html: str, index: int) -> str:
    start = html.index(f"<td>{index}</td>")
    return html[start : html.index("</tr>", start)]


def test_each_users_kwh_and_cost_stand_beside_their_gpu_hours(
    node: tuple[Machine, str],
) -> None:
    """An hour at 300 W under root's lease: the table of use per user reads 0.30 kWh and
    0.15 EUR (0.30 x 0.50) beside root's GPU-hours; the kWh chart is drawn."""
    machine, url = node
    with machine.daemon.client() as client:
        lease = client.allocate(1, label="train")
        machine.step(3600)

        def recorded() -> bool:
            users = client.usage(since=0)["users"]
            return any(u.get("energy_cost", 0) >= PRICE * 0.3 - 1e-6 for u in users)

        wait_for(recorded, 30, what="the hour's energy recorded")
        client.free(lease.id)
    charts = json.loads(get(url + "/api/charts")[1])["charts"]
    assert 'id="chart-energy-30d"' in charts
    table = charts[charts.index('id="usage-per-user"') :]
    assert "<th>GPU-hours</th><th>kWh</th><th>cost EUR</th>" in table
    assert "<td>root</td>" in table and "<td>0.30</td><td>0.15</td>" in table


def test_the_use_per_user_table_escapes_names_and_has_no_kwh_without_energy() -> None:
    """A user's name is text (escaped); a node that read no energy shows GPU-hours alone,
    with no empty kWh or cost column; where others have kWh, a user without any reads `-`."""
    hours = [{"ana": 2.0, "<b>ben": 5.0}]
    plain = usage_table(hours, [{}], EnergyPrice(0.5, "EUR"))
    assert "&lt;b&gt;ben" in plain and "<b>ben" not in plain
    assert "kWh" not in plain and "cost" not in plain
    assert plain.index("&lt;b&gt;ben") < plain.index("ana")  # the most GPU-hours first
    priced = usage_table(hours, [{"ana": 1.0}], EnergyPrice(0.5, "EUR"))
    assert "<td>ana</td><td>2.0</td><td>1.00</td><td>0.50</td>" in priced
    assert "<td>&lt;b&gt;ben</td><td>5.0</td><td>-</td><td>-</td>" in priced
    assert usage_table([{}], [{}], None) == ""
