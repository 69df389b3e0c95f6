"""genv's attach+detach of one GPU, measured in the same run for comparison.

genv is not a dependency: it is found as $GENV_PYTHON (a Python that imports genv) or as
the Python of a `genv` command on PATH. It reads `nvidia-smi`, so the probe gets a stand-in
on its PATH that prints the total memory of 8 GPUs, the only thing genv asks it for here.
Its state goes to a directory on the same disk as the daemon's ledger.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["genv_python", "measure_genv"]

_STAND_IN_SMI = "#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8; do echo 81920; done\n"

_PROBE = """
import json, statistics, sys, time
import genv.sdk

seconds = float(sys.argv[1])
times = []
with genv.sdk.activate():
    genv.sdk.detach()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        genv.sdk.attach(gpus=1)
        genv.sdk.detach()
        times.append(time.perf_counter() - started)
times.sort()
print(json.dumps({"p50_ms": statistics.median(times) * 1e3,
                  "p99_ms": times[int(0.99 * len(times))] * 1e3, "pairs": len(times)}))
"""


def genv_python() -> str | None:
    """A Python that can import genv, or None when genv is not installed."""
    explicit = os.environ.get("GENV_PYTHON")
    if explicit:
        return explicit
    command = shutil.which("genv")
    if command is None:
        return None
    first_line = Path(command).read_text(errors="replace").splitlines()[0]
    return first_line[2:].strip() if first_line.startswith("#!") else None


def measure_genv(python: str, scratch: Path, seconds: float) -> dict[str, float]:
    """p50 and p99 (ms) of genv.sdk attach(gpus=1)+detach in a loop for `seconds`."""
    bin_dir = scratch / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text(_STAND_IN_SMI)
    smi.chmod(0o755)
    state = scratch / "genv-state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir()
    environ = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "GENV_TMPDIR": str(state),
    }
    environ.pop("GENV_ENVIRONMENT_ID", None)
    done = subprocess.run(
        [python, "-c", _PROBE, str(seconds)],
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
