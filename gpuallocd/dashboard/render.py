"""From what was read to what is sent: run on the dashboard's thread, never on the loop."""

from __future__ import annotations

from collections.abc import Callable

from gpuallocd.dashboard.charts import charts_html
from gpuallocd.dashboard.page import page_html
from gpuallocd.dashboard.sections import gpus_html, history_html, queue_html
from gpuallocd.dashboard.source import NodeNow
from gpuallocd.dashboard.text import clock_time
from gpuallocd.ledger.reader import LedgerReader

__all__ = ["HISTORY_SHOWN", "Renderer"]

HISTORY_SHOWN = 15


class Renderer:
    """The page and its parts, from the node read on the loop and the ledger read here."""

    def __init__(self, reader: LedgerReader, user_name: Callable[[int], str]) -> None:
        self._reader = reader
        self._user_name = user_name

    def live(self, node: NodeNow) -> dict[str, str]:
        events = self._reader.history(HISTORY_SHOWN)
        return {
            "now": clock_time(node.now),
            "gpus": gpus_html(node, self._user_name),
            "queue": queue_html(node),
            "history": history_html(events, self._user_name),
        }

    def charts(self, node: NodeNow) -> dict[str, str]:
        return {"charts": charts_html(self._reader, node)}

    def page(self, node: NodeNow) -> str:
        return page_html(node.name, node.now, {**self.live(node), **self.charts(node)})
