"""`gpuallocd-jupyter`: install kernelspecs whose kernels run under a gpuallocd lease."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gpuallocd_jupyter.kernelspec import install_kernelspec, kernel_json

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuallocd-jupyter", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser(
        "install-kernelspec",
        help="install a Python kernelspec that leases GPUs from gpuallocd",
        description="Install a kernelspec running the Python kernel with GPUs leased for it.",
    )
    install.add_argument("--name", required=True, help="the kernel's name, e.g. python3-gpu2")
    install.add_argument("--display-name", help="shown in Jupyter (default from the count)")
    install.add_argument("--count", type=int, default=1, help="GPUs to lease (default 1)")
    install.add_argument("--policy", help="the daemon's policy to choose GPUs")
    install.add_argument("--label", help="the lease's label (default jupyter:KERNEL_ID)")
    install.add_argument("--ttl", type=float, help="lease lifetime between renewals, seconds")
    install.add_argument("--wait", action="store_true", help="queue until the GPUs are free")
    install.add_argument("--wait-timeout", type=float, help="give up waiting after SECONDS")
    install.add_argument("--visible", choices=["uuid", "index"], help="CUDA_VISIBLE_DEVICES form")
    install.add_argument("--socket", help="the daemon's socket (default $GPUALLOCD_SOCKET)")
    install.add_argument(
        "--nested",
        choices=["reuse", "new"],
        help="under a server started in a lease: use it (reuse, the default) or take a new one",
    )
    install.add_argument("--python", default=sys.executable, help="the kernel's interpreter")
    where = install.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="install for this user only")
    where.add_argument("--prefix", help="install under PREFIX/share/jupyter/kernels")
    return parser


def provisioner_config(args: argparse.Namespace) -> dict[str, Any]:
    """The provisioner settings given on the command line (count always, others when set)."""
    config: dict[str, Any] = {"count": args.count}
    for key in ("policy", "label", "ttl", "wait_timeout", "visible", "socket", "nested"):
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    if args.wait:
        config["wait"] = True
    return config


def _install(args: argparse.Namespace) -> int:
    if args.count < 1:
        print("gpuallocd-jupyter: --count must be at least 1", file=sys.stderr)
        return 2
    plural = "GPU" if args.count == 1 else "GPUs"
    display_name = args.display_name or f"Python 3 ({args.count} {plural}, gpuallocd)"
    spec = kernel_json(display_name, provisioner_config(args), args.python)
    try:
        path = install_kernelspec(args.name, spec, user=args.user, prefix=args.prefix)
    except (OSError, ValueError) as error:
        print(f"gpuallocd-jupyter: {error}", file=sys.stderr)
        return 1
    print(f"installed kernelspec {args.name} in {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit status."""
    args = _parser().parse_args(argv)
    if args.command == "install-kernelspec":
        return _install(args)
    return 2  # unreachable: argparse requires a known command
