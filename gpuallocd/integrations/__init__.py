"""Glue to the tools around gpuallocd: Slurm's gres.conf and CDI specs for container runtimes.

Everything here is pure or writes one file; nothing talks to the daemon.
"""

from __future__ import annotations

from gpuallocd.integrations.cdi import (
    CDI_KIND,
    CDI_VERSION,
    CdiError,
    LeaseLike,
    cdi_spec,
    write_cdi_spec,
)
from gpuallocd.integrations.devices import device_files, nvidia_device_nodes
from gpuallocd.integrations.slurm_gres import gres_lines, link_weight

__all__ = [
    "CDI_KIND",
    "CDI_VERSION",
    "CdiError",
    "LeaseLike",
    "cdi_spec",
    "device_files",
    "gres_lines",
    "link_weight",
    "nvidia_device_nodes",
    "write_cdi_spec",
]
