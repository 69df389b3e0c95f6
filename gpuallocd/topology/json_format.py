"""The project's own JSON topology format (see docs/topology.md).

    {
      "format": "gpuallocd-topology/1",
      "name": "dgx-a100",
      "gpus": [{"index": 0, "uuid": "GPU-...", "name": "...", "pci_bus_id": "...",
                "memory_total_bytes": 85899345920, "numa_node": 3, "cpu_affinity": "48-63",
                "vendor": "nvidia", "compute_capability": "8.0"}],
      "links": [{"gpus": [0, 1], "pcie": "NODE", "nvlinks": 12, "xgmi": 0}],
      "nvswitch_fabrics": [{"gpus": [0, 1, 2, 3, 4, 5, 6, 7], "nvlinks": 12}]
    }

Links and fabrics name GPUs by index or by UUID. Pairs not listed have no known link.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuallocd.errors import InventoryError
from gpuallocd.model import Gpu, Link, MigDevice, PcieLevel, Topology, pair_key
from gpuallocd.topology.smi_text import synthetic_uuid

__all__ = ["FORMAT", "topology_from_json", "topology_to_json"]

FORMAT = "gpuallocd-topology/1"
_GPU_FIELDS = (
    "name",
    "pci_bus_id",
    "memory_total_bytes",
    "numa_node",
    "cpu_affinity",
    "vendor",
    "compute_capability",
    "compute_partition",
    "partition_of",
)
_MIG_FIELDS = ("uuid", "gpu_instance_id", "compute_instance_id", "profile", "memory_total_bytes")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise InventoryError(f"topology JSON: {message}")


def _gpu_from_json(item: Any) -> Gpu:
    _require(isinstance(item, dict), "each entry of 'gpus' must be an object")
    index = item.get("index")
    _require(isinstance(index, int) and index >= 0, "each GPU needs a non-negative integer 'index'")
    uuid = item.get("uuid") or synthetic_uuid(index)
    _require(isinstance(uuid, str), f"GPU {index}: 'uuid' must be a string")
    fields = {k: item[k] for k in _GPU_FIELDS if item.get(k) is not None}
    return Gpu(
        uuid=uuid,
        index=index,
        mig_mode=bool(item.get("mig_mode", False)),
        mig_devices=tuple(_mig_from_json(index, m) for m in item.get("mig_devices", [])),
        **fields,
    )


def _mig_from_json(index: int, item: Any) -> MigDevice:
    _require(
        isinstance(item, dict) and isinstance(item.get("uuid"), str),
        f"GPU {index}: each MIG device needs a 'uuid'",
    )
    return MigDevice(**{k: item[k] for k in _MIG_FIELDS if item.get(k) is not None})


def _resolver(gpus: tuple[Gpu, ...]) -> Mapping[int | str, str]:
    names: dict[int | str, str] = {g.index: g.uuid for g in gpus}
    names.update({g.uuid: g.uuid for g in gpus})
    return names


def _resolve(names: Mapping[int | str, str], ref: Any) -> str:
    _require(isinstance(ref, (int, str)) and ref in names, f"unknown GPU {ref!r} in a link")
    return names[ref]


def _pcie(value: Any) -> PcieLevel | None:
    if value is None:
        return None
    _require(
        isinstance(value, str) and value in PcieLevel.__members__, f"unknown PCIe level {value!r}"
    )
    return PcieLevel[value]


def _link_from_json(item: Any, names: Mapping[int | str, str]) -> tuple[tuple[str, str], Link]:
    _require(isinstance(item, dict), "each entry of 'links' must be an object")
    pair = item.get("gpus")
    _require(isinstance(pair, list) and len(pair) == 2, "each link names exactly two 'gpus'")
    a, b = (_resolve(names, ref) for ref in pair)
    _require(a != b, "a link joins two different GPUs")
    nvlinks, xgmi = item.get("nvlinks", 0), item.get("xgmi", 0)
    _require(isinstance(nvlinks, int) and nvlinks >= 0, "'nvlinks' must be a non-negative integer")
    _require(isinstance(xgmi, int) and xgmi >= 0, "'xgmi' must be a non-negative integer")
    link = Link(
        nvlinks=nvlinks,
        pcie=_pcie(item.get("pcie")),
        xgmi=xgmi,
        nvswitch=bool(item.get("nvswitch", False)),
    )
    return pair_key(a, b), link


def _apply_fabric(
    links: dict[tuple[str, str], Link], item: Any, names: Mapping[int | str, str]
) -> None:
    _require(
        isinstance(item, dict) and isinstance(item.get("gpus"), list), "a fabric lists its 'gpus'"
    )
    members = [_resolve(names, ref) for ref in item["gpus"]]
    lanes = item.get("nvlinks", 0)
    _require(
        isinstance(lanes, int) and lanes >= 0, "a fabric's 'nvlinks' must be a non-negative integer"
    )
    for i, a in enumerate(members):
        for b in members[i + 1 :]:
            old = links.get(pair_key(a, b), Link())
            links[pair_key(a, b)] = Link(
                nvlinks=max(old.nvlinks, lanes), pcie=old.pcie, xgmi=old.xgmi, nvswitch=True
            )


def topology_from_json(data: Any, *, name: str = "topology") -> Topology:
    """Build a Topology from the decoded JSON document."""
    _require(isinstance(data, dict), "the document must be an object")
    _require(data.get("format", FORMAT) == FORMAT, f"unsupported format {data.get('format')!r}")
    raw_gpus = data.get("gpus")
    _require(isinstance(raw_gpus, list) and bool(raw_gpus), "'gpus' must be a non-empty list")
    gpus = tuple(_gpu_from_json(item) for item in raw_gpus)
    _require(len({g.index for g in gpus}) == len(gpus), "GPU indices must be unique")
    _require(len({g.uuid for g in gpus}) == len(gpus), "GPU UUIDs must be unique")
    names = _resolver(gpus)
    links = dict(_link_from_json(item, names) for item in data.get("links", []))
    for fabric in data.get("nvswitch_fabrics", []):
        _apply_fabric(links, fabric, names)
    return Topology(name=str(data.get("name", name)), gpus=gpus, links=links)


def _gpu_to_json(gpu: Gpu) -> dict[str, Any]:
    out: dict[str, Any] = {"index": gpu.index, "uuid": gpu.uuid}
    out.update({k: getattr(gpu, k) for k in _GPU_FIELDS if getattr(gpu, k) is not None})
    if gpu.mig_mode:
        out["mig_mode"] = True
    if gpu.mig_devices:
        out["mig_devices"] = [
            {k: getattr(m, k) for k in _MIG_FIELDS if getattr(m, k) is not None}
            for m in gpu.mig_devices
        ]
    return out


def _link_to_json(topology: Topology, key: tuple[str, str], link: Link) -> dict[str, Any]:
    by_uuid = topology.by_uuid()
    out: dict[str, Any] = {"gpus": sorted(by_uuid[u].index for u in key)}
    if link.pcie is not None:
        out["pcie"] = link.pcie.name
    if link.nvlinks:
        out["nvlinks"] = link.nvlinks
    if link.xgmi:
        out["xgmi"] = link.xgmi
    if link.nvswitch:
        out["nvswitch"] = True
    return out


def topology_to_json(topology: Topology) -> dict[str, Any]:
    """The JSON document for a Topology; reading it back gives the same Topology."""
    known = set(topology.uuids())
    links = [
        _link_to_json(topology, key, link)
        for key, link in sorted(topology.links.items())
        if key[0] in known and key[1] in known and link != Link()
    ]
    links.sort(key=lambda item: item["gpus"])
    return {
        "format": FORMAT,
        "name": topology.name,
        "gpus": [_gpu_to_json(g) for g in topology.gpus],
        "links": links,
    }
