"""Allocate+free throughput and latency against a running daemon: `python -m benchmarks.bench`.

Part of the benchmarks, not of the installed CLI: every pair is a real lease of whoever runs
it, so a run on a production box fills that user's history and usage. Point it at a daemon
started for the purpose (`make bench` starts its own).
"""

from __future__ import annotations

from pathlib import Path

import click

from gpuallocd.cli.output import echo_json

__all__ = ["bench"]

DEFAULT_STATE_DIR = "/var/lib/gpuallocd"  # the daemon's default state_dir


@click.command()
@click.option(
    "--socket",
    envvar="GPUALLOCD_SOCKET",
    default=None,
    help="The daemon's socket (default: $GPUALLOCD_SOCKET, else the installed default).",
)
@click.option(
    "--clients",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Client processes running at once.",
)
@click.option(
    "--seconds",
    type=click.FloatRange(0.1, 3600),
    default=5.0,
    show_default=True,
    help="How long to drive the daemon.",
)
@click.option(
    "--gpus",
    "count",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="GPUs per allocation.",
)
@click.option("--policy", help="Allocation policy (default: the daemon's).")
@click.option(
    "--raw", is_flag=True, help="Drive the daemon with a bare HTTP client instead of gpulease."
)
@click.option(
    "--floor",
    is_flag=True,
    help="Also measure the machine's floor (socket round trip, durable commit) and the ratio.",
)
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_STATE_DIR,
    show_default=True,
    help="With --floor: a directory on the disk of the daemon's ledger.",
)
@click.option("--json", "as_json", is_flag=True, help="JSON output.")
def bench(
    socket: str | None,
    clients: int,
    seconds: float,
    count: int,
    policy: str | None,
    raw: bool,
    floor: bool,
    state_dir: Path,
    as_json: bool,
) -> None:
    """Measure allocate+free pairs per second and their latency (p50/p90/p99)."""
    from gpulease import Client

    from benchmarks.floor import measure_floor
    from benchmarks.load import run_bench

    socket_path = Client(socket).socket_path
    with Client(socket_path) as client:
        client.health()
        free = sum(1 for gpu in client.status() if gpu.state == "free")
    crowded = clients * count > free
    if crowded and not as_json:
        click.echo(crowded_note(clients, count, free), err=True)
    result = run_bench(
        socket_path, clients=clients, seconds=seconds, count=count, policy=policy, raw=raw
    )
    machine = measure_floor(state_dir) if floor else None
    if as_json:
        extra = {} if machine is None else {"floor": machine.to_json()}
        echo_json({**result.to_json(), "free_gpus": free, **extra})
        return
    click.echo(
        f"{result.clients} client(s), {result.seconds:g} s: {result.pairs} allocate+free pairs "
        f"({result.pairs_per_second:.0f}/s), {result.errors} errors\n"
        f"pair latency ms: p50 {result.p50_ms:.2f}  p90 {result.p90_ms:.2f}  "
        f"p99 {result.p99_ms:.2f}  max {result.max_ms:.2f}\n"
        f"allocate p50 {result.allocate_p50_ms:.2f} ms, free p50 {result.free_p50_ms:.2f} ms"
    )
    click.echo(refusal_line(result.refused, result.refused_p50_ms, crowded))
    if machine is not None:
        click.echo(
            f"floor: socket round trip p50 {machine.round_trip_us:.0f} us, durable commit p50 "
            f"{machine.commit_us:.0f} us on {machine.directory}; a pair (2 of each) "
            f"{machine.pair_ms:.3f} ms; this daemon's pair p50 is "
            f"{result.p50_ms / machine.pair_ms:.1f}x the floor"
        )


def crowded_note(clients: int, count: int, free: int) -> str:
    """Said before a run whose clients cannot all hold their GPUs at once."""
    fits = max(free // count, 0)
    return (
        f"bench: {clients} client(s) x {count} GPU(s) > {free} free GPU(s): some "
        f"requests will be refused (counted on a line of their own, not as pairs); "
        f"--clients {fits} measures only pairs that fit"
        if fits
        else f"bench: {free} free GPU(s), {count} asked for by each client: every "
        "request will be refused"
    )


def refusal_line(refused: int, p50_ms: float, crowded: bool) -> str:
    """Refusals apart from the pairs: how many, and how fast one was answered."""
    if not refused:
        return "refused: none"
    why = " (more GPUs asked for at once than were free)" if crowded else ""
    return f"refused: {refused} requests{why}, answered in p50 {p50_ms:.2f} ms"


if __name__ == "__main__":
    bench()
