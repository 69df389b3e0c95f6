"""The whole page, rendered on the server: complete without JavaScript; the script only
swaps the sections in place with fresh ones from `/api/live` and `/api/charts`."""

from __future__ import annotations

from collections.abc import Mapping

from gpuallocd import __version__
from gpuallocd.dashboard.text import clock_time, esc

__all__ = ["LIVE_SECTIONS", "page_html"]

# id in the page and key in /api/live, and the heading shown: what an admin must see first
# (use without a lease, the GPUs) above the charts, the rest below them.
ABOVE_CHARTS = (
    ("unleased", "GPU use without a lease"),
    ("gpus", "GPUs"),
)
BELOW_CHARTS = (
    ("queue", "Queue"),
    ("reservations", "Advance reservations"),
    ("history", "Recent history"),
    ("channels", "Notification channels failing"),
)
LIVE_SECTIONS = ABOVE_CHARTS + BELOW_CHARTS
# Without JavaScript the browser reloads the whole page this often (seconds).
NOSCRIPT_REFRESH = 30


def page_html(node_name: str, now: float, parts: Mapping[str, str]) -> str:
    """`parts`: the HTML of the summary line, of each live section and of `charts`."""

    def sections(which: tuple[tuple[str, str], ...]) -> str:
        return "".join(
            f'<section id="section-{key}"><h2>{title}</h2>'
            f'<div id="{key}" class="live">{parts[key]}</div></section>'
            for key, title in which
        )

    return (
        "<!DOCTYPE html>"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>gpuallocd: {esc(node_name)}</title>"
        '<link rel="stylesheet" href="static/dashboard.css">'
        f'<noscript><meta http-equiv="refresh" content="{NOSCRIPT_REFRESH}"></noscript>'
        '<script src="static/dashboard.js" defer></script>'
        "</head><body>"
        f"<header><h1>{esc(node_name)}</h1>"
        f"<p>gpuallocd {esc(__version__)} &middot; read-only &middot; as of "
        f'<time id="now">{clock_time(now)}</time></p>'
        f'<p id="summary" class="summary">{parts["summary"]}</p></header>'
        f"<main>{sections(ABOVE_CHARTS)}"
        f'<section><h2>Usage</h2><div id="charts" class="charts">{parts["charts"]}</div>'
        f"</section>{sections(BELOW_CHARTS)}</main></body></html>"
    )
