"""bind.distinct: after the script bound its device, every rank drives a different GPU.

Indices cannot be compared across ranks (CUDA_VISIBLE_DEVICES may differ per rank), so the
physical GPU is compared by UUID. The GPU a rank drives is where its model's parameters live
(a DDP model first, then any module: FSDP, or a model reduced by hand), else where the CUDA
tensors alive at the first batch live. The current CUDA device is no evidence: ddplint's own
NCCL test has initialised CUDA by then, and a script that places tensors with
torch.device("cuda", local_rank) never changes it from 0.

With NCCL before 2.30, ranks that share a GPU fail earlier, in the first NCCL call or in DDP's
construction ("Duplicate GPU detected"); that error is the same finding.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import group_by, ranks_text
from ddplint.runtime.registry import BIND_DISTINCT
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

DUPLICATE_GPU = re.compile(
    r"Duplicate GPU detected ?: rank (\d+) and rank (\d+) both on CUDA "
    r"device ([0-9a-fA-F]+)"
)
MULTIPLE_RANKS = re.compile(r"Multiple Ranks are using the same GPU/Partition")
BIND_FIX = (
    "bind each rank before building the model: torch.cuda.set_device(int(os.environ"
    "['LOCAL_RANK'])) and use torch.device('cuda', local_rank) (see DDP101, DDP102, DDP103)"
)


def uuid_label(raw: str, name: str, cuda_visible_devices: str | None) -> str:
    """torch's device UUID with the prefix nvidia-smi shows: MIG- for a MIG instance (CUDA names
    it "<GPU> MIG 1g.10gb", and it is picked by a MIG- entry), else GPU-."""
    if not raw or raw.startswith(("GPU-", "MIG-")):
        return raw
    mig = " MIG " in f" {name} " or any(t.strip().upper().startswith("MIG-") for t in (cuda_visible_devices or "").split(","))
    return ("MIG-" if mig else "GPU-") + raw


def _describe(index: int) -> dict:
    import torch

    props = torch.cuda.get_device_properties(index)
    bus = None
    if hasattr(props, "pci_bus_id"):
        # torch's stubs list pci_bus_id but not the domain and device ids that come with it
        domain, device = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        bus = f"{domain:08X}:{props.pci_bus_id:02X}:{device:02X}.0"
    return {
        "index": index,
        "name": props.name,
        "total_memory": props.total_memory,
        "uuid": uuid_label(str(getattr(props, "uuid", "") or ""), props.name, os.environ.get("CUDA_VISIBLE_DEVICES")),
        "pci_bus_id": bus,
    }


def cuda_indices(tensors) -> Counter:
    """How many of the tensors live on each CUDA device index."""
    devices = (_device(t) for t in tensors)
    return Counter(d.index or 0 for d in devices if d is not None and d.type == "cuda")


def _device(tensor):
    """A tensor's device; None for the few tensor subclasses (fake or functional wrappers)
    that refuse to say."""
    try:
        return tensor.device
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def binding_info(models: list, modules: list, tensors: list) -> dict:
    """This rank's GPU: where its DDP model's parameters live, else any module's, else the
    live CUDA tensors'. `models` are the DDP instances, `modules` every live nn.Module,
    `tensors` every live tensor."""
    import torch

    from ddplint.runtime import cpucuda

    if cpucuda.ACTIVE is not None:
        return _asked_binding(cpucuda.ACTIVE)
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {"device_type": "cpu", "cuda_initialized": False, "cuda_available": torch.cuda.is_available()}
    current = torch.cuda.current_device()
    out = {"device_type": "cuda", "cuda_initialized": True, "current_device": current}
    for basis, counts in (
        ("DDP model", cuda_indices(p for m in models for p in m.parameters())),
        ("model parameters", cuda_indices(p for m in modules for p in m.parameters(recurse=False))),
        ("CUDA tensors", cuda_indices(tensors)),
    ):
        if counts:
            used = counts.most_common(1)[0][0]
            out.update(gpu=_describe(used), basis=basis, devices=sorted(counts), model_device=used)
            return out
    out["basis"] = "no tensor on a GPU yet"
    return out


def _asked_binding(asked) -> dict:
    """CUDA mapped to the CPU: the GPU the rank asked for stands in for the one it would drive.
    Its identity is the physical index on this node (through CUDA_VISIBLE_DEVICES), so ranks
    that all ask for cuda:0 share it, as they would on the GPU machine."""
    import socket

    index = asked.index()
    if index is None:  # a script that never asked for CUDA ran on the CPU, as it would anywhere
        return {
            "device_type": "cpu",
            "cuda_initialized": False,
            "cuda_available": False,
            "mapped_to_cpu": True,
            "asked": asked.as_record(),
        }
    out = {
        "device_type": "cuda",
        "cuda_initialized": True,
        "mapped_to_cpu": True,
        "current_device": asked.set_device or 0,
        "asked": asked.as_record(),
    }
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    physical = visible[index] if index < len(visible) else str(index)
    out.update(
        gpu={
            "index": index,
            "name": "(asked for; run on the CPU)",
            "total_memory": None,
            "uuid": f"{socket.gethostname()}/GPU{physical}",
            "pci_bus_id": None,
        },
        basis="asked",
        devices=[index],
        model_device=index,
    )
    return out


def rank_table(records: list[RankRecord]) -> list[str]:
    lines = [f"{'rank':>4}  {'host':<20} {'node':>4} {'local':>5}  device"]
    for rec in sorted(records, key=lambda r: r.rank):
        b = rec.binding
        gpu = b.gpu
        if gpu:
            current = b.current_device if b.current_device is not None else gpu.index
            where = f"cuda:{gpu.index} {gpu.name} {gpu.uuid}" + (
                f" (current device cuda:{current})" if current != gpu.index else ""
            )
        elif b.error:
            where = f"? ({b.error})"
        elif b.device_type == "cuda":
            where = f"? (no tensor on a GPU yet; current device cuda:{b.current_device})"
        elif not b.reached:
            where = "? (no batch reached)"
        else:
            where = "cpu"
        lines.append(f"{rec.rank:>4}  {rec.host:<20} {rec.env.get('GROUP_RANK', '?'):>4} {rec.local_rank:>5}  {where}")
    return lines


def duplicate_gpu(records: list[RankRecord]) -> tuple[list[int], str | None, str] | None:
    """(ranks, PCI bus id or None, NCCL's line) when NCCL refused two ranks on one GPU.

    NCCL before 2.30 names both ranks and the bus ("Duplicate GPU detected : rank 1 and rank 0
    both on CUDA device 1a000"); from 2.30 it says "Multiple Ranks are using the same
    GPU/Partition" on each refused rank, naming neither.
    """
    shared: list[int] = []
    line = None
    for rec in sorted(records, key=lambda r: r.rank):
        allreduce = rec.comm.allreduce
        texts = [rec.error.text if rec.error else "", (allreduce.error if allreduce else None) or ""]
        for text in texts:
            m = DUPLICATE_GPU.search(text)
            if m:
                digits = m[3].rjust(9, "0")
                bus = f"{digits[:-5]}:{digits[-5:-3]}:{digits[-3:-1]}.{digits[-1]}"
                return sorted({int(m[1]), int(m[2])}), bus, m[0]
            m = MULTIPLE_RANKS.search(text)
            if m and rec.rank not in shared:
                shared.append(rec.rank)
                line = m[0]
    return (shared, None, line) if shared and line else None


def _identity(rec: RankRecord) -> str | tuple[str, str] | None:
    """What tells a rank's GPU from another: its UUID, else (node, PCI bus id) for builds that
    report no UUID (older ROCm), else nothing: ranks are then never said to share a GPU."""
    gpu = rec.binding.gpu
    if gpu is None:
        return None
    if gpu.uuid:
        return gpu.uuid
    if gpu.pci_bus_id:
        return rec.where, gpu.pci_bus_id
    return None


def distinct_check(records: list[RankRecord]) -> CheckResult:
    if not records:
        return CheckResult(BIND_DISTINCT, Status.SKIP, "no rank reported")
    table = rank_table(records)
    duplicate = duplicate_gpu(records)
    if duplicate is not None:
        ranks, bus, line = duplicate
        where = f"the GPU at PCI {bus}" if bus else "a GPU"
        return CheckResult(
            BIND_DISTINCT,
            Status.FAIL,
            f"{ranks_text(ranks)} share {where}: NCCL refused them "
            f"({'Duplicate GPU detected' if bus else MULTIPLE_RANKS.pattern})",
            table + [f"NCCL: {line}"],
            BIND_FIX,
            rule="DDP101",
            data={"ranks": ranks, "pci_bus_id": bus},
        )
    reached = [r for r in records if r.binding.reached]
    if not reached:
        return CheckResult(BIND_DISTINCT, Status.SKIP, "no rank reached its first training batch", table)
    on_gpu = [r for r in reached if r.binding.gpu]
    if not on_gpu:
        available = any(r.binding.cuda_available for r in reached)
        why = "the script had not touched CUDA by its first batch" if available else "no GPU: the ranks run on CPU"
        return CheckResult(BIND_DISTINCT, Status.SKIP, why, table)
    shared = {key: ranks for key, ranks in group_by(on_gpu, _identity).items() if key is not None and len(ranks) > 1}
    data = {"ranks": {r.rank: r.binding.gpu.uuid if r.binding.gpu else None for r in reached}}
    if not shared and any(_identity(r) is None for r in on_gpu):
        return CheckResult(
            BIND_DISTINCT,
            Status.SKIP,
            "the GPUs report neither a UUID nor a PCI bus id: whether ranks share one cannot be told",
            table,
            data=data,
        )
    if not shared:
        cpu = [r.rank for r in reached if not r.binding.gpu]
        if cpu:
            return CheckResult(
                BIND_DISTINCT,
                Status.WARN,
                f"{ranks_text(cpu)} had not used a GPU by the first batch while others did",
                table,
                "move the model to torch.device('cuda', local_rank) on every rank",
                data=data,
            )
        mapped = any(r.binding.mapped_to_cpu for r in on_gpu)
        return CheckResult(
            BIND_DISTINCT,
            Status.PASS,
            f"{len(on_gpu)} ranks asked for {len(on_gpu)} different GPUs (CUDA mapped to the CPU)"
            if mapped
            else f"{len(on_gpu)} ranks on {len(on_gpu)} different GPUs",
            table,
            data=data,
        )
    by_rank = {r.rank: r for r in on_gpu}
    parts = []
    for ranks in shared.values():
        gpu = by_rank[ranks[0]].binding.gpu
        assert gpu is not None  # every rank of on_gpu has one
        hosts = {by_rank[r].where for r in ranks}
        parts.append(
            f"{ranks_text(ranks)} share GPU cuda:{gpu.index} {gpu.uuid or f'PCI {gpu.pci_bus_id}'} on {', '.join(sorted(hosts))}"
        )
    return CheckResult(BIND_DISTINCT, Status.FAIL, "; ".join(parts), table, BIND_FIX, rule="DDP101", data=data)
