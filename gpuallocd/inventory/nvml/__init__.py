"""The NVIDIA backend: every NVML call goes through `gate.py`.

backend.py    NvmlInventory: the Inventory protocol over NVML
gate.py       the one module that loads pynvml; errors become NvmlError
api.py        typed wrappers over the NVML calls the backend makes
discovery.py  GPUs, MIG devices, NUMA and CPU affinity at start and on rescan
links.py      PCIe common ancestors, NVLink lanes and NVSwitch fabrics
live.py       memory, utilisation and compute processes, on an interval
health.py     Xid events and lost GPUs
"""
