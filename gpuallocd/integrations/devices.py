"""Which device file on the host is which GPU, for gres.conf and CDI specs.

The NVIDIA driver names its device files by minor number (`/dev/nvidiaN`); the minor number
is not the NVML index in general, so it is read from the driver's own table,
`/proc/driver/nvidia/gpus/BUS_ID/information`, whose lines include `GPU UUID:` and
`Device Minor:`. Where the driver is absent (a fake topology, another machine's file), the
index stands in for the minor number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from gpuallocd.model import Gpu

__all__ = ["NVIDIA_CONTROL_NODES", "device_files", "natural_key", "nvidia_device_nodes"]

NVIDIA_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
"""Device files every CUDA process needs besides its GPUs' own."""

_FIELD = re.compile(r"^\s*(GPU UUID|Device Minor)\s*:\s*(\S+)\s*$", re.MULTILINE)


def _parse_information(text: str) -> tuple[str, int] | None:
    fields = dict(_FIELD.findall(text))
    uuid, minor = fields.get("GPU UUID"), fields.get("Device Minor")
    if uuid is None or minor is None or not minor.isdigit():
        return None
    return uuid, int(minor)


def nvidia_device_nodes(proc_root: Path = Path("/proc")) -> dict[str, str]:
    """UUID → `/dev/nvidiaN` for each GPU the NVIDIA driver lists; empty without the driver."""
    nodes: dict[str, str] = {}
    try:
        entries = sorted((proc_root / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return nodes
    for entry in entries:
        try:
            parsed = _parse_information((entry / "information").read_text(encoding="utf-8"))
        except OSError:
            continue
        if parsed is not None:
            nodes[parsed[0]] = f"/dev/nvidia{parsed[1]}"
    return nodes


def device_files(
    gpus: Iterable[Gpu], known: Mapping[str, str], pattern: str = "/dev/nvidia{index}"
) -> dict[str, str]:
    """UUID → device file: from `known` (the driver's table), else `pattern` with the index."""
    return {g.uuid: known.get(g.uuid) or pattern.format(index=g.index) for g in gpus}


def natural_key(path: str) -> tuple[str, int]:
    """Sort key that puts `/dev/nvidia2` before `/dev/nvidia10`."""
    match = re.search(r"(\d+)$", path)
    if match is None:
        return (path, -1)
    return (path[: match.start()], int(match.group(1)))
