"""The dashboard's energy: a chart of kWh per user per day, and the power line."""

from __future__ import annotations

import time
from pathlib import Path

from gpuallocd.dashboard.charts import charts_html
from gpuallocd.dashboard.sections import power_html
from gpuallocd.dashboard.source import NodeNow
from gpuallocd.ledger import Ledger
from gpuallocd.model.energy import EnergyUse


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
    assert power_html(_node(0.0, power)) == (
        '<p class="power">power: 1,450 of 1,600 W committed, 900 W drawn</p>'
    )
    assert power_html(_node(0.0)) == ""
