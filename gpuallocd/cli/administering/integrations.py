"""Commands that write configuration for the tools around gpuallocd: `slurm-gres`."""

from __future__ import annotations

import click

from gpuallocd.cli.common import daemon_client
from gpuallocd.errors import GpuallocError
from gpuallocd.integrations.devices import device_files, nvidia_device_nodes
from gpuallocd.integrations.slurm_gres import gres_lines
from gpuallocd.model import Topology
from gpuallocd.topology import load_topology, topology_from_json

__all__ = ["COMMANDS"]


def _topology(ctx: click.Context, spec: str | None) -> Topology:
    try:
        if spec is not None:
            return load_topology(spec)
        with daemon_client(ctx) as client:
            return topology_from_json(client.topology())
    except GpuallocError as exc:
        raise click.ClickException(exc.message) from None


@click.command("slurm-gres", short_help="Print gres.conf lines for this node's GPUs")
@click.option(
    "--topology",
    "spec",
    metavar="FILE",
    help="Read the topology from FILE (or example:NAME) instead of the daemon.",
)
@click.option("--node-name", help="Prefix each line with NodeName=NAME (for a shared gres.conf).")
@click.option("--type", "gpu_type", help="Add Type=TYPE (as in slurm.conf's Gres=gpu:TYPE:N).")
@click.option(
    "--file-pattern",
    default="/dev/nvidia{index}",
    show_default=True,
    help="Device file of a GPU the NVIDIA driver does not list ({index} is its index).",
)
@click.option("--no-links", is_flag=True, help="Leave out Links= (to compare Slurm without it).")
@click.pass_context
def slurm_gres(
    ctx: click.Context,
    spec: str | None,
    node_name: str | None,
    gpu_type: str | None,
    file_pattern: str,
    no_links: bool,
) -> None:
    """Print gres.conf lines for this node's GPUs, with Links= from the topology.

    Device files come from the NVIDIA driver's table (/proc/driver/nvidia/gpus) where it
    lists the GPU, else from --file-pattern. Append the output to gres.conf and declare
    `Gres=gpu:N` for the node in slurm.conf.
    """
    topology = _topology(ctx, spec)
    files = device_files(topology.gpus, nvidia_device_nodes(), file_pattern)
    lines = gres_lines(topology, files, node_name=node_name, gpu_type=gpu_type, links=not no_links)
    click.echo("\n".join(lines))


COMMANDS = (slurm_gres,)
