"""What an admin must see first: one line of the node's state (GPUs free, leased, used
without a lease, reserved; who waits) with the GPU model named once, and GPU use without a
lease in its own place at the top: who, which process, on which GPU, since when."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from gpuallocd.dashboard.source import NodeNow
from gpuallocd.dashboard.text import clock_time, duration, esc

__all__ = ["models", "summary_html", "unleased_html"]

# The states as the summary counts them (in this order), and the words it uses.
COUNTED = (
    ("free", "free"),
    ("leased", "leased"),
    ("in-use", "used without a lease"),
    ("reserved", "reserved"),
    ("mig", "in MIG mode"),
    ("shared", "shared"),
    ("draining", "draining"),
    ("drained", "drained"),
    ("unhealthy", "unhealthy"),
)


def models(node: NodeNow) -> str:
    """The GPU models once, as HTML: `4 x NVIDIA RTX A6000`, or `2 x A100, 2 x H100`
    (with a multiplication sign)."""
    counts = collections.Counter(str(g["name"]) for g in node.gpus)
    return ", ".join(f"{n} &times; {esc(name)}" for name, n in counts.most_common())


def summary_html(node: NodeNow) -> str:
    """`4 GPUs (4 x ...): 1 free, 2 leased, 1 used without a lease; 1 waiting`."""
    states = collections.Counter(str(g["state"]) for g in node.gpus)
    known = dict(COUNTED)
    parts = [_count(states[s], words, s == "in-use") for s, words in COUNTED if states[s]]
    parts += [_count(n, state, False) for state, n in sorted(states.items()) if state not in known]
    waiting = len(node.queue)
    queue = f"{waiting} waiting" if waiting else "nobody waiting"
    return (
        f"<strong>{len(node.gpus)} GPUs</strong> ({models(node)}): {', '.join(parts)}; {esc(queue)}"
    )


def _count(n: int, words: str, alarm: bool) -> str:
    text = esc(f"{n} {words}")
    return f'<span class="alarm">{text}</span>' if alarm else text


def _unleased_rows(node: NodeNow, user_name: Callable[[int], str]) -> list[dict[str, Any]]:
    """Each process on a GPU without a lease: from the daemon's record where it keeps one
    (process name, since when), else from the sample (pid and user only)."""
    found = [dict(p) for p in node.unleased]
    known = {(p["pid"], p["gpu_index"]) for p in found}
    for gpu in node.gpus:
        for process in gpu["foreign_processes"]:
            if (process["pid"], gpu["index"]) not in known:
                uid = process["uid"]
                user = user_name(uid) if uid is not None else "?"
                found.append({"pid": process["pid"], "user": user, "gpu_index": gpu["index"]})
    return sorted(found, key=lambda p: (p["gpu_index"], p["pid"]))


def unleased_html(node: NodeNow, user_name: Callable[[int], str]) -> str:
    """GPU use without a lease, one row a process; a plain line when there is none."""
    rows = []
    for p in _unleased_rows(node, user_name):
        since = p.get("since")
        when = "-" if since is None else f"{clock_time(since)} ({duration(node.now - since)} ago)"
        rows.append(
            '<tr class="unleased">'
            f"<td>GPU {esc(p['gpu_index'])}</td>"
            f'<td class="who">{esc(p["user"])}</td>'
            f"<td><code>{esc(p.get('command') or '-')}</code></td>"
            f"<td>{esc(p['pid'])}</td><td>{esc(when)}</td></tr>"
        )
    if not rows:
        return '<p class="empty">none: every process on a GPU runs under a lease</p>'
    head = "".join(f"<th>{h}</th>" for h in ("GPU", "user", "process", "pid", "since"))
    return (
        f'<table class="unleased alarm"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
