"""What `gpuallocctl run` does once its arguments are read: lease, run, free.

No click here: `gpuallocctl run` reaches this through a quick argument reader as well as
through the click command, and a job launcher should start as fast as the interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import FrameType

__all__ = ["FORWARDED_SIGNALS", "RunRequest", "lease_and_run", "run_command"]

# SIGINT is not forwarded: a Ctrl-C at the terminal reaches the command directly (it shares
# our process group), and forwarding it too would interrupt it twice. It is ignored here
# while the command runs, so the lease is freed after the command has handled it.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


@dataclass(frozen=True)
class RunRequest:
    """The lease `run` asks for and the command it runs."""

    command: tuple[str, ...]
    count: int | None = None
    gpus: tuple[str, ...] = ()
    policy: str | None = None
    ttl: float | None = None
    label: str | None = None
    wait: bool = False
    timeout: float | None = None
    visible: str = "uuid"


@contextlib.contextmanager
def _forward_signals(child_pid: int) -> Iterator[None]:
    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child_pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_command(command: Sequence[str]) -> int:
    """Run `command` with our environment, forwarding signals; its exit code (128+N if killed).

    posix_spawn rather than subprocess: the module alone costs a good part of a bare
    interpreter's start. Our own descriptors are not inherited (Python opens them
    non-inheritable), as with subprocess's close_fds.
    """
    try:
        child_pid = os.posix_spawnp(command[0], list(command), dict(os.environ))
    except FileNotFoundError:
        print(f"gpuallocctl: command not found: {command[0]}", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"gpuallocctl: permission denied: {command[0]}", file=sys.stderr)
        return 126
    with _forward_signals(child_pid):
        _, status = os.waitpid(child_pid, 0)  # retried by Python when a signal interrupts it
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def lease_and_run(request: RunRequest, socket: str | None, *, announce: bool) -> int:
    """Lease the GPUs, run the command with CUDA_VISIBLE_DEVICES set, free them; its exit code.

    Client errors (no daemon, nothing fits, ...) propagate as `gpulease` exceptions.
    """
    from gpulease import gpu_lease

    lease = gpu_lease(
        request.count or 1,
        gpus=list(request.gpus) or None,
        policy=request.policy,
        ttl=request.ttl,
        wait=request.wait,
        timeout=request.timeout,
        label=request.label or " ".join(request.command)[:200],
        socket=socket,
        visible=request.visible,
    )
    with lease as granted:
        if announce:
            gpu_list = ",".join(str(g.index) for g in granted.gpus)
            print(f"gpuallocctl: lease {granted.id}: GPU {gpu_list}", file=sys.stderr, flush=True)
        return run_command(request.command)
