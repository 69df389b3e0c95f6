"""Kernelspecs that run the Python kernel under a gpuallocd lease."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from jupyter_client.kernelspec import KernelSpecManager

__all__ = ["PROVISIONER_NAME", "install_kernelspec", "kernel_json"]

PROVISIONER_NAME = "gpuallocd"


def kernel_json(
    display_name: str, config: dict[str, Any], python: str = sys.executable
) -> dict[str, Any]:
    """The kernel.json of an ipykernel run by `python`, launched by the gpuallocd provisioner
    with `config` (the provisioner's settings: count, policy, ttl, ...)."""
    return {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "metadata": {
            "debugger": True,
            "kernel_provisioner": {"provisioner_name": PROVISIONER_NAME, "config": config},
        },
    }


def install_kernelspec(
    name: str, spec: dict[str, Any], *, user: bool = False, prefix: str | None = None
) -> str:
    """Install `spec` as kernel `name` (replacing one of that name); where it went.

    As `jupyter kernelspec install`: for this user with `user`, under `prefix` with a prefix,
    else system-wide.
    """
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / name
        source.mkdir()
        (source / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n")
        destination: str = KernelSpecManager().install_kernel_spec(
            str(source), name, user=user, prefix=prefix
        )
    return destination
