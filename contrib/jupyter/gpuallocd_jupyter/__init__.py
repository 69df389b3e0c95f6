"""gpuallocd-jupyter: Jupyter kernels that run on GPUs leased from gpuallocd.

Kernelspecs select the provisioner by name (`gpuallocd`, in the
`jupyter_client.kernel_provisioners` entry-point group); `gpuallocd-jupyter install-kernelspec`
writes one.
"""

from __future__ import annotations

from gpuallocd_jupyter.kernel_lease import KernelLease, LeaseRequest
from gpuallocd_jupyter.kernelspec import PROVISIONER_NAME, install_kernelspec, kernel_json
from gpuallocd_jupyter.provisioner import GpuallocdProvisioner, MemorySharesUnsupported

__version__ = "0.1.0"

__all__ = [
    "PROVISIONER_NAME",
    "GpuallocdProvisioner",
    "KernelLease",
    "LeaseRequest",
    "MemorySharesUnsupported",
    "__version__",
    "install_kernelspec",
    "kernel_json",
]
