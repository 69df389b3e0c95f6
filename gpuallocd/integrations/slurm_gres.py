"""gres.conf lines for Slurm, with `Links=` taken from the node's topology.

Slurm reads one line per GPU: `Name=gpu File=/dev/nvidia0 Links=-1,2,1,0`. `Links=` lists,
in the order of the GPU lines, how many connections this GPU has to each GPU (-1 for itself,
0 for none); Slurm's select plugin then favours GPUs with more links between them for jobs
that ask for several. Without it Slurm takes the first free GPUs in file order.

The lines are ordered by device file (`/dev/nvidia2` before `/dev/nvidia10`), the order
Slurm numbers the GPUs in, so that position N of every `Links=` list is the Nth line.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuallocd.integrations.devices import natural_key
from gpuallocd.model import Gpu, Link, Topology

__all__ = ["gres_lines", "link_weight", "ordered_gpus"]


def link_weight(link: Link) -> int:
    """The connection count Slurm is told for a pair: NVLink or xGMI links, else 0.

    A pair joined through an NVSwitch whose link count is unknown counts as one link. PCIe
    paths count as 0, as Slurm's own NVML autodetection reports them.
    """
    if link.nvlinks:
        return link.nvlinks
    if link.xgmi:
        return link.xgmi
    return 1 if link.nvswitch else 0


def ordered_gpus(topology: Topology, files: Mapping[str, str]) -> list[Gpu]:
    """The GPUs in the order Slurm numbers them: by device file."""
    return sorted(topology.gpus, key=lambda g: natural_key(files[g.uuid]))


def _links_field(gpu: Gpu, order: list[Gpu], topology: Topology) -> str:
    weights = [
        -1 if other.uuid == gpu.uuid else link_weight(topology.link(gpu.uuid, other.uuid))
        for other in order
    ]
    return ",".join(str(w) for w in weights)


def gres_lines(
    topology: Topology,
    files: Mapping[str, str],
    *,
    node_name: str | None = None,
    gpu_type: str | None = None,
    links: bool = True,
) -> list[str]:
    """One gres.conf line per GPU, in Slurm's order, each with a comment naming its UUID.

    `files` maps each GPU's UUID to its device file. With `links=False` the `Links=` field
    is left out (to compare Slurm's choices with and without it).
    """
    order = ordered_gpus(topology, files)
    lines = [f"# gpuallocd: {len(order)} GPUs of {topology.name}, in Slurm's order"]
    for gpu in order:
        fields = [f"NodeName={node_name}"] if node_name else []
        fields.append("Name=gpu")
        if gpu_type:
            fields.append(f"Type={gpu_type}")
        fields.append(f"File={files[gpu.uuid]}")
        if links and len(order) > 1:
            fields.append(f"Links={_links_field(gpu, order, topology)}")
        lines.append(f"# index {gpu.index}: {gpu.uuid}")
        lines.append(" ".join(fields))
    return lines
