"""contrib/slurm on a real single-node Slurm: the ledger while an srun job runs and after.

Runs contrib/slurm/test-single-node.sh, which starts slurmctld, slurmd (and munged where
none runs) from the distribution's packages, a gpuallocd on a fake DGX-1V, and fake GPU
device files. Skipped, with the reason, where those are missing or the test is not root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "contrib" / "slurm" / "test-single-node.sh"
NEEDED = ("slurmctld", "slurmd", "munged", "srun", "sinfo", "scontrol", "squeue")
MISSING = [tool for tool in NEEDED if shutil.which(tool) is None]


@pytest.mark.skipif(bool(MISSING), reason=f"Slurm is not installed here (no {', '.join(MISSING)})")
@pytest.mark.skipif(os.geteuid() != 0, reason="slurmd and the prolog must run as root")
@pytest.mark.skipif(
    not os.access("/usr/bin/python3", os.X_OK), reason="the hooks need /usr/bin/python3"
)
@pytest.mark.timeout(300)
def test_a_slurm_job_is_in_the_ledger_while_it_runs_and_not_after() -> None:
    """A real srun job's GPUs are leased for its uid as slurm:JOBID, and freed by the epilog."""
    done = subprocess.run(
        ["bash", str(SCRIPT)],
        env=dict(os.environ, PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "PASS: job" in done.stderr
