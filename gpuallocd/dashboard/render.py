"""From what was read to what is sent: run on the dashboard's thread, never on the loop."""

from __future__ import annotations

from collections.abc import Callable

from gpuallocd.dashboard.channels import failing_channels_html
from gpuallocd.dashboard.charts import charts_html
from gpuallocd.dashboard.page import page_html
from gpuallocd.dashboard.sections import (
    gpus_html,
    history_html,
    power_html,
    queue_html,
    reservations_html,
)
from gpuallocd.dashboard.source import NodeNow
from gpuallocd.dashboard.summary import summary_html, unleased_html
from gpuallocd.dashboard.text import clock_time
from gpuallocd.ledger.reader import LedgerReader
from gpuallocd.model.energy import EnergyPrice

__all__ = ["CHARTS_FRESH_SECONDS", "HISTORY_SHOWN", "LIVE_FRESH_SECONDS", "Renderer"]

HISTORY_SHOWN = 15
# The charts (days of usage, a day of leases) are drawn again at most this often: a page
# left open, or several, cost one drawing per interval, not one per load.
CHARTS_FRESH_SECONDS = 30.0
# The live parts of a node whose GPUs and leases have not changed are reused this long: pages
# loaded over and over cost one rendering a second (the script polls every 2 s).
LIVE_FRESH_SECONDS = 1.0


class Renderer:
    """The page and its parts, from the node read on the loop and the ledger read here."""

    def __init__(
        self,
        reader: LedgerReader,
        user_name: Callable[[int], str],
        price: EnergyPrice | None = None,
    ) -> None:
        """`price`: the site's `energy_price_per_kwh`, for the cost of each user's kWh."""
        self._reader = reader
        self._user_name = user_name
        self._price = price
        self._charts: tuple[float, dict[str, str]] | None = None  # drawn at, parts
        self._live: tuple[float, object, dict[str, str]] | None = None  # at, node key, parts

    def live(self, node: NodeNow) -> dict[str, str]:
        """The GPUs, the queue, the history and the failing notification channels; those of
        less than LIVE_FRESH_SECONDS ago while the GPUs and leases are as they were."""
        key = (
            node.gpus,
            node.labels,
            len(node.queue),
            node.reservations,
            node.unleased,
            node.power,
        )
        kept = self._live
        if kept is not None and kept[1] == key and 0 <= node.now - kept[0] < LIVE_FRESH_SECONDS:
            return kept[2]
        parts = self._render_live(node)
        self._live = (node.now, key, parts)
        return parts

    def _render_live(self, node: NodeNow) -> dict[str, str]:
        events = self._reader.history(limit=HISTORY_SHOWN)
        failing = self._reader.failing_channels()
        return {
            "now": clock_time(node.now),
            "summary": summary_html(node),
            "unleased": unleased_html(node, self._user_name),
            "gpus": gpus_html(node, self._user_name) + power_html(node),
            "queue": queue_html(node),
            "reservations": reservations_html(node),
            "history": history_html(events, self._user_name),
            "channels": failing_channels_html(failing, node.now, self._user_name),
        }

    def charts(self, node: NodeNow) -> dict[str, str]:
        """The charts as of at most CHARTS_FRESH_SECONDS ago (only the dashboard's one
        thread calls this: no lock)."""
        drawn = self._charts
        if drawn is not None and 0 <= node.now - drawn[0] < CHARTS_FRESH_SECONDS:
            return drawn[1]
        parts = {"charts": charts_html(self._reader, node, self._price)}
        self._charts = (node.now, parts)
        return parts

    def page(self, node: NodeNow) -> str:
        return page_html(node.name, node.now, {**self.live(node), **self.charts(node)})
