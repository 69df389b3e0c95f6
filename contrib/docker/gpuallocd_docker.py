#!/usr/bin/env python3
"""Run a Docker or Podman container under a gpuallocd lease that lives as long as the container.

    gpuallocd-docker -n 2 run -d --rm IMAGE CMD...
    gpuallocd-docker --runtime podman --gpu 3 run -it IMAGE

Options before `run` are the lease's; everything after `run` goes to `RUNTIME run` unchanged.

How the lease follows the container, not the CLI (which exits at once under `-d`): the
wrapper starts a supervisor in a session of its own. The supervisor takes the lease (bound to
its own process, renewed in the background), hands it to the wrapper over a pipe and waits.
The wrapper runs `RUNTIME run --cidfile FILE ...` with the lease's GPUs, in the foreground
and on the terminal, then closes the pipe and exits with the runtime's status. The supervisor
reads the container id from FILE and runs `RUNTIME wait ID`; when the container has exited
(or was never created) it frees the lease and exits. Killing the supervisor ends the lease
at once (the daemon watches the process), so the GPUs never stay leased to a dead container.

Standard library and the `gpulease` client only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpulease import GpuallocError, gpu_lease
from gpulease.lease_id import LEASE_ID_VARIABLE

CONTAINER_LABEL = "io.gpuallocd.lease"
DEVICE_MODES = ("gpus", "cdi", "cdi-lease")
RETRY_WAIT_SECONDS = 1.0
NO_ANSWER = '{"error": {"message": "the supervisor ended without a lease (see --log)"}}'


def device_args(mode: str, lease_id: str, uuids: Sequence[str]) -> list[str]:
    """The runtime's options that expose exactly the lease's GPUs.

    `gpus`: Docker's `--gpus "device=UUID,..."` (the quotes keep the commas inside one
    field of the CSV Docker parses). `cdi`: one `--device nvidia.com/gpu=UUID` per GPU, from
    the spec `nvidia-ctk cdi generate --device-name-strategy=uuid` writes. `cdi-lease`:
    `--device gpuallocd.io/lease=LEASE_ID`, from the spec gpuallocd writes per lease.
    """
    if mode == "gpus":
        return ["--gpus", f'"device={",".join(uuids)}"']
    if mode == "cdi":
        return [arg for uuid in uuids for arg in ("--device", f"nvidia.com/gpu={uuid}")]
    if mode == "cdi-lease":
        return ["--device", f"gpuallocd.io/lease={lease_id}"]
    raise ValueError(f"unknown device mode {mode!r}; expected one of {DEVICE_MODES}")


def user_cidfile(run_args: Sequence[str]) -> str | None:
    """The `--cidfile` the user passed to `run` themselves, if any."""
    for i, arg in enumerate(run_args):
        if arg == "--":
            break
        if arg == "--cidfile" and i + 1 < len(run_args):
            return run_args[i + 1]
        if arg.startswith("--cidfile="):
            return arg.split("=", 1)[1]
    return None


def run_command(
    runtime: str, mode: str, lease: dict[str, Any], cidfile: str, run_args: Sequence[str]
) -> list[str]:
    """`RUNTIME run` with the lease's devices, label and cidfile before the user's arguments."""
    uuids = [gpu["uuid"] for gpu in lease["gpus"]]
    command = [runtime, "run"]
    if user_cidfile(run_args) is None:
        command += ["--cidfile", cidfile]
    command += ["--label", f"{CONTAINER_LABEL}={lease['id']}"]
    command += ["--env", f"{LEASE_ID_VARIABLE}={lease['id']}"]
    command += device_args(mode, lease["id"], uuids)
    return command + list(run_args)


def default_mode(runtime: str) -> str:
    return "gpus" if Path(runtime).name.startswith("docker") else "cdi"


# The supervisor ------------------------------------------------------------------------


def _container_running(runtime: str, cid: str) -> bool:
    done = subprocess.run(
        [runtime, "inspect", "--format", "{{.State.Running}}", cid],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode == 0 and done.stdout.strip() == "true"


def wait_for_container(runtime: str, cidfile: Path) -> None:
    """Return once the container named in `cidfile` has exited (at once if there is none)."""
    try:
        cid = cidfile.read_text().strip()
    except FileNotFoundError:
        return
    while cid:
        if subprocess.run([runtime, "wait", cid], capture_output=True, check=False).returncode:
            if not _container_running(runtime, cid):  # gone, or removed by --rm
                return
            time.sleep(RETRY_WAIT_SECONDS)  # the runtime's daemon hiccuped; ask again
            continue
        return


def supervise(config: dict[str, Any]) -> int:
    """Lease, tell the wrapper (stdout), wait for it (stdin EOF), then for the container.

    `config`: `lease` (gpu_lease's arguments), `runtime`, `cidfile`, and `tempdir` (the
    directory the wrapper made for the cidfile, removed at the end; None for the user's own).
    """
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with gpu_lease(**config["lease"]) as lease:
            sys.stdout.write(json.dumps(lease.raw) + "\n")
            sys.stdout.close()
            sys.stdin.read()  # EOF: the runtime's CLI returned, or the wrapper died
            wait_for_container(config["runtime"], Path(config["cidfile"]))
    except GpuallocError as exc:
        sys.stdout.write(json.dumps({"error": {"code": exc.code, "message": exc.message}}))
        return 1
    finally:
        if config["tempdir"]:
            shutil.rmtree(config["tempdir"], ignore_errors=True)
    return 0


# The wrapper ---------------------------------------------------------------------------


def lease_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "count": args.count or len(args.gpus) or 1,
        "gpus": [int(g) if g.isdigit() else g for g in args.gpus] or None,
        "policy": args.policy,
        "wait": args.wait,
        "timeout": args.timeout,
        "label": args.label or f"{Path(args.runtime).name} run",
        "socket": args.socket,
    }


def start_supervisor(config: dict[str, Any], log: str | None) -> subprocess.Popen[str]:
    command = [sys.executable, os.path.abspath(__file__), "--supervise", json.dumps(config)]
    with open(log or os.devnull, "a") as stderr:
        return subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,  # out of the terminal's reach: Ctrl-C, hangup
        )


def wrap(args: argparse.Namespace, run_args: Sequence[str]) -> int:
    """Lease through a supervisor, run the container, hand the container to the supervisor."""
    cidfile, tempdir = user_cidfile(run_args), None
    if cidfile is None:
        tempdir = tempfile.mkdtemp(prefix="gpuallocd-docker-")
        cidfile = os.path.join(tempdir, "cid")
    config = {"lease": lease_options(args), "runtime": args.runtime}
    supervisor = start_supervisor(config | {"cidfile": cidfile, "tempdir": tempdir}, args.log)
    assert supervisor.stdout is not None and supervisor.stdin is not None
    answer = json.loads(supervisor.stdout.readline() or NO_ANSWER)
    if "error" in answer:
        supervisor.wait()
        print(f"gpuallocd-docker: {answer['error']['message']}", file=sys.stderr)
        return 1
    mode = args.devices or default_mode(args.runtime)
    command = run_command(args.runtime, mode, answer, cidfile, run_args)
    # Ctrl-C goes to the runtime's CLI, which passes it to the container; a handler (not
    # SIG_IGN, which the CLI would inherit) keeps the wrapper alive until the CLI returns.
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        status = subprocess.call(command)
    finally:
        supervisor.stdin.close()  # hand the container over
    return status


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="gpuallocd-docker", usage="%(prog)s [options] run [RUNTIME RUN ARGS...]"
    )
    parser.add_argument("-n", "--count", type=int, help="how many GPUs (default 1)")
    parser.add_argument(
        "--gpu", dest="gpus", action="append", default=[], help="a GPU by index or UUID"
    )
    parser.add_argument("--policy", help="allocation policy (default: the daemon's)")
    parser.add_argument("--wait", action="store_true", help="queue until the GPUs are free")
    parser.add_argument("--timeout", type=float, help="wait at most this long (seconds)")
    parser.add_argument("--label", help="the lease's label (default: 'RUNTIME run')")
    parser.add_argument("--socket", help="the daemon's socket (default: $GPUALLOCD_SOCKET)")
    parser.add_argument(
        "--runtime",
        default=os.environ.get("GPUALLOCD_DOCKER_RUNTIME", "docker"),
        help="docker, podman or a path (default: $GPUALLOCD_DOCKER_RUNTIME, else docker)",
    )
    parser.add_argument(
        "--devices",
        choices=DEVICE_MODES,
        help="how the GPUs are passed (default: gpus for docker, cdi for others)",
    )
    parser.add_argument("--log", help="append the supervisor's messages to this file")
    if "run" not in argv:
        parser.error("expected `run` followed by the runtime's run arguments")
    split = list(argv).index("run")
    return parser.parse_args(argv[:split]), list(argv[split + 1 :])


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--supervise"]:
        return supervise(json.loads(argv[1]))
    args, run_args = parse(argv)
    return wrap(args, run_args)


if __name__ == "__main__":
    sys.exit(main())
