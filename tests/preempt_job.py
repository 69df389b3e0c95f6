"""Jobs of preemptible leases, run as real users by the preemption tests.

`train NAME STEPS DIR SOCKET`: a training loop in plain Python, the shape of the PyTorch
example in docs/preemption.md: it resumes from $GPUALLOCD_CHECKPOINT, and on the warning
($GPUALLOCD_PREEMPT_FILE appears) or the signal saves its state to DIR, acknowledges with
`gpuallocctl checkpoint-done PATH` and exits. Run under `gpuallocctl run --requeue`.

`hold MODE LOG SOCKET [COUNT]`: a `gpu_lease(preemptible=True)` holder with a forked worker;
both write to LOG what they hear (`warned`, `signal PID NAME`), and MODE says what the holder
does: `ack` acknowledges at the warning, `ack-on-signal` at the signal (SIGTERM), `ignore`
asks for SIGUSR1, logs it and never acknowledges (the kill at the deadline is its end).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

STEP_SECONDS = 0.05
PR_SET_PDEATHSIG = 1


def _log(path: str, line: str) -> None:
    with open(path, "a") as out:
        out.write(line + "\n")


def train(name: str, steps: int, directory: str, socket: str) -> int:
    state = {"step": 0}
    resume = os.environ.get("GPUALLOCD_CHECKPOINT")
    if resume:
        with open(resume) as saved:
            state = json.load(saved)
        print(f"{name}: resumed from {resume} at step {state['step']}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    notice = os.environ.get("GPUALLOCD_PREEMPT_FILE", "")
    while state["step"] < steps:
        if stop or (notice and os.path.exists(notice)):
            path = os.path.join(directory, f"{name}-step-{state['step']}.json")
            with open(path, "w") as out:
                json.dump(state, out)
            ctl = [sys.executable, "-m", "gpuallocd.cli", "--socket", socket]
            subprocess.run([*ctl, "checkpoint-done", path], check=True)
            print(f"{name}: saved {path} and acknowledged", flush=True)
            return 0
        state["step"] += 1
        time.sleep(STEP_SECONDS)
    print(f"{name}: done at step {state['step']}", flush=True)
    return 0


def hold(mode: str, log: str, socket: str, count: int) -> int:
    from gpulease import gpu_lease

    def heard(signum: int, _frame: object) -> None:
        _log(log, f"signal {os.getpid()} {signal.Signals(signum).name}")
        if mode == "ack-on-signal" and os.getpid() == holder:
            lease.checkpoint_done(f"/ckpt/{os.getpid()}")
            _log(log, "acked")

    holder = os.getpid()
    chosen = signal.SIGUSR1 if mode == "ignore" else signal.SIGTERM
    signal.signal(chosen, heard)
    signal.signal(signal.SIGTERM, heard if mode != "ignore" else signal.SIG_IGN)
    asked = chosen.name
    with gpu_lease(count, preemptible=True, socket=socket, preempt_signal=asked) as lease:
        _log(log, f"lease {lease.id} holder {holder}")
        worker = os.fork()
        if worker == 0:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # never outlives the test
            _log(log, f"worker {os.getpid()}")
            while True:
                time.sleep(0.05)
        while not lease.preempt_requested:
            time.sleep(0.02)
        _log(log, f"warned {lease.preempt_deadline}")
        if mode == "ack":
            lease.checkpoint_done(f"/ckpt/{holder}")
            _log(log, "acked")
        while True:
            time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1] == "train":
        sys.exit(train(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]))
    count = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    sys.exit(hold(sys.argv[2], sys.argv[3], sys.argv[4], count))
