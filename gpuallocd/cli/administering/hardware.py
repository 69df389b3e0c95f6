"""Commands about the hardware itself: `topology` and `rescan`."""

from __future__ import annotations

from typing import Any

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.cli.output import echo_json
from gpuallocd.topology import (
    render_smi_topo,
    topology_from_json,
    topology_to_json,
)

__all__ = ["COMMANDS"]


def _read_locally(spec: str) -> dict[str, Any]:
    """The topology document of an inventory opened here, without a daemon."""
    from gpuallocd.inventory import open_inventory

    inventory = open_inventory(spec)
    try:
        return topology_to_json(inventory.topology())  # GPUs it cannot read are logged
    finally:
        inventory.close()


def _read_file(path: str) -> dict[str, Any]:
    """The topology document of a topology file: JSON, nvidia-smi, rocm-smi or amd-smi text."""
    from gpuallocd.cli.topology_input import topology_argument

    return topology_to_json(topology_argument(path))


def _print(document: dict[str, Any], as_json: bool) -> None:
    if as_json:
        echo_json(document)
        return
    click.echo(render_smi_topo(topology_from_json(document)), nl=False)


@click.command(short_help="The node's GPUs and links, as nvidia-smi topo -m")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="The project's JSON topology document, for replay with plan and simulate.",
)
@click.option(
    "--local",
    is_flag=True,
    help="Read this node's NVIDIA GPUs through NVML directly, without the daemon.",
)
@click.option(
    "--inventory",
    "spec",
    metavar="SPEC",
    help="Read any inventory here, without the daemon: nvml, amdsmi, "
    "nvml-recording:NAME, amd-recording:NAME, example:NAME or a file.",
)
@click.option(
    "--from",
    "source",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="Read a topology file instead: `nvidia-smi topo -m`, `rocm-smi --showtopo` or "
    "`amd-smi topology` text as pasted, or the project's JSON.",
)
@click.pass_context
def topology(
    ctx: click.Context, as_json: bool, local: bool, spec: str | None, source: str | None
) -> None:
    """The node's GPUs and links, as `nvidia-smi topo -m` prints them.

    Save it with --json to capture a machine: `gpuallocctl topology --json > node.json`,
    then replay it with `gpuallocd --inventory node.json`. With --from FILE, convert a
    pasted matrix: `gpuallocctl topology --from topo.txt --json > node.json`.
    """
    if sum(bool(x) for x in (local, spec, source)) > 1:
        raise click.UsageError("use only one of --local, --inventory and --from")
    if source:
        document = _read_file(source)
    elif local or spec:
        document = _read_locally(spec or "nvml")
    else:
        with daemon_client(ctx) as client:
            document = client.topology()
    _print(document, as_json or ctx.obj.json)


@click.command(short_help="Discover the node's GPUs again (root only)")
@click.pass_context
def rescan(ctx: click.Context) -> None:
    """Discover the node's GPUs again (root only): after a GPU reset or a replacement.

    Also clears the Xid marks that keep GPUs out of service; run it once the GPU is reset.
    """
    with daemon_client(ctx) as client:
        document = client.rescan()
    if ctx.obj.json:
        echo_json(document)
        return
    click.echo(f"rescanned: {len(document.get('gpus', []))} GPUs")
    _print(document, as_json=False)


COMMANDS = (topology, rescan)
