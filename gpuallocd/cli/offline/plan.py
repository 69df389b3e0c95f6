"""Offline commands, no daemon needed: plan, simulate, policy-bench."""

from __future__ import annotations

import json
import time
from typing import IO, Any

import click

from gpuallocd.cli.offline.sim_text import orders_table
from gpuallocd.cli.output import echo_json, table
from gpuallocd.cli.quantities import ByteSize
from gpuallocd.cli.topology_input import topology_argument
from gpuallocd.errors import InvalidRequest
from gpuallocd.model import Topology
from gpuallocd.planning import (
    Plan,
    make_plan,
    make_unit_plan,
    parse_gpu_list,
    parse_unit_list,
    read_trace,
    simulate,
)
from gpuallocd.planning.bench import BenchRow, bench_policy, random_topology
from gpuallocd.planning.queue_sim import is_job_trace, read_jobs, simulate_orders
from gpuallocd.planning.simulate import Summary
from gpuallocd.policies import Policy, get_policy

__all__ = ["COMMANDS", "plan", "policy_bench", "simulate_command"]

DEFAULT_BENCH_TOPOLOGIES = ("example:dgx1-volta", "example:dgx2", "example:synthetic-32gpu")

_topology_option = click.option(
    "--topology",
    "topology_spec",
    required=True,
    metavar="FILE",
    help="A topology file (`nvidia-smi topo -m` text or gpuallocd JSON), example:NAME, or "
    "a recorded machine: nvml-recording:NAME (MIG instances included).",
)
_policy_option = click.option(
    "--policy", "policy_name", default="best-effort", show_default=True, help="Policy name."
)
_options_option = click.option(
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="A policy option, e.g. seed=7; VALUE is read as JSON, else as text. Repeatable.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON.")


def _wants_json(ctx: click.Context, local: bool) -> bool:
    return local or bool(getattr(ctx.obj, "json", False))


def _parse_options(options: tuple[str, ...]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for item in options:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--option")
        try:
            parsed[key.replace("-", "_")] = json.loads(text)
        except json.JSONDecodeError:
            parsed[key.replace("-", "_")] = text
    return parsed


def _load(spec: str) -> Topology:
    return topology_argument(spec)


def _policy(name: str, options: tuple[str, ...]) -> Policy:
    try:
        return get_policy(name, **_parse_options(options))
    except TypeError as exc:  # an option the policy does not take
        raise InvalidRequest(f"policy {name}: {exc}", field="option") from exc


# plan -----------------------------------------------------------------------------------------


def _print_plan(result: Plan) -> None:
    gpus = ", ".join(str(i) for i in result.gpus)
    click.echo(f"{result.policy} on {result.topology}: GPU {gpus}")
    click.echo(
        f"score {result.score} ({result.lanes} NVLink/XGMI lanes, {result.pcie_points} PCIe "
        f"points, {result.numa_pairs} same-NUMA pairs)"
    )
    click.echo(f"why: {result.reason}")
    if result.kind != "whole":
        click.echo(f"{result.kind} units: {' '.join(result.uuids)}")
        click.echo(f"fragmentation of what is left: {result.fragmentation:.4f}")
    if result.pairs:
        rows = [
            (f"{p.gpus[0]}-{p.gpus[1]}", p.link, p.pcie, "yes" if p.same_numa else "no", p.score)
            for p in result.pairs
        ]
        click.echo(table(("PAIR", "LINK", "PCIE", "SAME NUMA", "SCORE"), rows))


@click.command(short_help="Which GPUs a policy would pick on a topology, and why")
@_topology_option
@_policy_option
@click.option("-n", "--count", type=click.IntRange(min=1), required=True, help="How many GPUs.")
@click.option("--busy", metavar="LIST", default="", help="Leased GPUs: indices or UUIDs, a,b,c.")
@click.option("--require", metavar="LIST", default="", help="GPUs the set must hold: a,b,c.")
@click.option(
    "--memory", metavar="SIZE", type=ByteSize(), help="Plan shares of SIZE (every GPU shared)."
)
@click.option("--mig", metavar="PROFILE", help="Plan MIG instances of PROFILE.")
@_options_option
@_json_option
@click.pass_context
def plan(
    ctx: click.Context,
    topology_spec: str,
    policy_name: str,
    count: int,
    busy: str,
    require: str,
    memory: int | None,
    mig: str | None,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Which GPUs a policy would pick on a topology, and why (score, links); with --memory or
    --mig, where shares or MIG instances would go, and the fragmentation they leave."""
    topology = _load(topology_spec)
    if memory is not None or mig is not None:
        busy_units, required_units = (
            parse_unit_list(topology, busy),
            parse_unit_list(topology, require),
        )
        result = make_unit_plan(
            topology,
            count,
            memory_bytes=memory,
            mig_profile=mig,
            busy=busy_units,
            required=required_units,
        )
    else:
        policy = _policy(policy_name, options)
        busy_gpus = parse_gpu_list(topology, busy)
        required = parse_gpu_list(topology, require)
        result = make_plan(topology, policy, count, busy=busy_gpus, required=required)
    if _wants_json(ctx, as_json):
        echo_json(result.to_json())
    else:
        _print_plan(result)


# simulate -------------------------------------------------------------------------------------


def _print_summary(summary: Summary, seconds: float) -> None:
    click.echo(f"{summary.policy} on {summary.topology}: {summary.steps} steps in {seconds:.2f} s")
    rows: list[tuple[str, Any]] = [
        ("grants", summary.grants),
        ("refusals", summary.refusals),
        ("frees", summary.frees),
        ("free errors", summary.free_errors),
        ("mean set score", None if summary.mean_score is None else f"{summary.mean_score:.0f}"),
        ("fragmentation (mean)", f"{summary.fragmentation:.4f}"),
        ("fragmentation (max)", f"{summary.fragmentation_max:.4f}"),
        ("fragmentation (end)", f"{summary.fragmentation_final:.4f}"),
        ("active leases at end", summary.active_leases),
    ]
    if summary.mean_tiers is not None:
        tiers = summary.mean_tiers
        rows.insert(5, ("mean lanes per grant", f"{tiers['lanes']:.3f}"))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        click.echo(f"{label.ljust(width)}  {'-' if value is None else value}")


@click.command(
    name="simulate",
    short_help="Replay a trace of requests and report how a policy did",
)
@_topology_option
@_policy_option
@click.option(
    "--trace",
    "trace_file",
    type=click.File("r", encoding="utf-8"),
    required=True,
    help="JSON Lines of allocate and free operations, or of timed submits ('-' reads stdin).",
)
@click.option(
    "--half-life",
    "half_life_hours",
    type=click.FloatRange(min=0, min_open=True),
    default=168.0,
    show_default=True,
    help="Timed trace: fair_share_half_life_hours.",
)
@click.option(
    "--wait-weight",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Timed trace: fair_share_wait_weight.",
)
@_options_option
@_json_option
@click.pass_context
def simulate_command(
    ctx: click.Context,
    topology_spec: str,
    policy_name: str,
    trace_file: IO[str],
    half_life_hours: float,
    wait_weight: float,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Replay a trace of requests and report grants, refusals, scores and fragmentation; a
    timed trace (submits) runs under fifo and fair-share side by side."""
    topology = _load(topology_spec)
    policy = _policy(policy_name, options)
    lines = trace_file.readlines()
    if is_job_trace(lines):
        fifo, fair = simulate_orders(
            topology, policy, read_jobs(lines), half_life_hours=half_life_hours,
            wait_weight=wait_weight,
        )  # fmt: skip
        if _wants_json(ctx, as_json):
            echo_json({"orders": [fifo.to_json(), fair.to_json()]})
        else:
            click.echo(orders_table(topology.name, fifo, fair))
        return
    start = time.perf_counter()
    result = simulate(topology, policy, read_trace(lines))
    if _wants_json(ctx, as_json):
        echo_json(result.to_json())
    else:
        _print_summary(result.summary, time.perf_counter() - start)


# policy-bench ---------------------------------------------------------------------------------


def _bench_cells(row: BenchRow) -> tuple[object, ...]:
    if row.error is not None:
        return (row.topology, row.gpus, row.state, row.count, None, None, None, row.error)
    exact = "yes" if row.exact else "NO"
    median, slowest = f"{row.median_ms:.2f}", f"{row.max_ms:.2f}"
    return (row.topology, row.gpus, row.state, row.count, median, slowest, row.search_nodes, exact)


def _bench_table(rows: list[BenchRow]) -> str:
    headers = ("TOPOLOGY", "GPUS", "STATE", "N", "MEDIAN MS", "MAX MS", "NODES", "EXACT")
    return table(headers, [_bench_cells(r) for r in rows])


@click.command(name="policy-bench", short_help="Time a policy for every request size")
@click.option(
    "--topology",
    "topology_specs",
    multiple=True,
    metavar="FILE",
    help="Topologies to time (repeatable; default: DGX-1 Volta, DGX-2, synthetic 32-GPU).",
)
@click.option(
    "--random-topology",
    "random_sizes",
    multiple=True,
    type=click.IntRange(min=2, max=64),
    metavar="N",
    help="Also time a random N-GPU topology with no structure (the search's worst case).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the random topologies.")
@_policy_option
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(min=1))
@_options_option
@_json_option
@click.pass_context
def policy_bench(
    ctx: click.Context,
    topology_specs: tuple[str, ...],
    random_sizes: tuple[int, ...],
    seed: int,
    policy_name: str,
    repeat: int,
    options: tuple[str, ...],
    as_json: bool,
) -> None:
    """Time a policy for every request size, on an idle and on a half-busy node."""
    specs = topology_specs or (() if random_sizes else DEFAULT_BENCH_TOPOLOGIES)
    topologies = [_load(s) for s in specs] + [random_topology(n, seed) for n in random_sizes]
    _policy(policy_name, options)  # fail early on a bad name or option
    rows: list[BenchRow] = []
    for topology in topologies:
        rows += bench_policy(topology, lambda: _policy(policy_name, options), repeat=repeat)
    if _wants_json(ctx, as_json):
        echo_json({"policy": policy_name, "rows": [r.to_json() for r in rows]})
    else:
        click.echo(_bench_table(rows))


COMMANDS = (plan, simulate_command, policy_bench)
