"""gpu.inventory and stack.nvml: which GPUs the job will get, and whether they can carry it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ddplint.runtime.checks.common import Findings, gb_label, mib, plural
from ddplint.runtime.checks.stack import cuda_compat, driver_cuda_text
from ddplint.runtime.nvml import Machine
from ddplint.runtime.registry import GPU_INVENTORY, STACK_NVML
from ddplint.runtime.verdict import CheckResult, Status

# A display server's framebuffer is expected on a desktop GPU; flag it only when it is large.
GRAPHICS_TOLERATED = 0.05
# A foreign process holding more than this share of a GPU leaves too little for a training job.
FOREIGN_FAIL = 0.5


@dataclass
class Visible:
    indices: list[int]  # positions in Machine.gpus, in CUDA order (PCI order assumed)
    note: str | None  # why the list is shorter than CUDA_VISIBLE_DEVICES suggests
    mig: dict[int, str] = field(default_factory=dict)  # position -> the MIG instance named


def visible_gpus(machine: Machine, cuda_visible_devices: str | None) -> Visible:
    """The GPUs CUDA will enumerate, honouring CUDA_VISIBLE_DEVICES by index, by GPU UUID (or a
    unique prefix of it) and by MIG instance (MIG-<uuid>, or the older MIG-GPU-<uuid>/<gi>/<ci>).

    CUDA numbers the GPUs this process may open, so an index counts only those (a GPU the
    cgroup keeps away is not in Machine.gpus). CUDA stops at the first entry that names no
    device (or one already named) and ignores the rest, so "0,1,7,2" on a 4-GPU host exposes
    two GPUs, not three.
    """
    count = len(machine.gpus)
    if cuda_visible_devices is None:
        return Visible(list(range(count)), None)
    out: list[int] = []
    mig: dict[int, str] = {}
    seen: set[tuple[int, str | None]] = set()
    for token in (t.strip() for t in cuda_visible_devices.split(",")):
        if not token:
            if out or cuda_visible_devices.strip():
                return Visible(out, f"empty entry in CUDA_VISIBLE_DEVICES={cuda_visible_devices!r}", mig)
            return Visible(out, "CUDA_VISIBLE_DEVICES is empty: no GPU is visible")
        found = _resolve(machine, token)
        if found is None or found in seen:
            why = "names a GPU twice" if found is not None else "names no GPU of this host"
            return Visible(out, f"CUDA_VISIBLE_DEVICES entry {token!r} {why}; CUDA ignores it and every entry after it", mig)
        seen.add(found)
        out.append(found[0])
        if found[1] is not None:
            mig[found[0]] = found[1]
    return Visible(out, None, mig)


def _resolve(machine: Machine, token: str) -> tuple[int, str | None] | None:
    """(position of the GPU, the MIG instance's UUID or None) that one entry names."""
    if token.lstrip("-").isdigit():
        idx = int(token)
        return (idx, None) if 0 <= idx < len(machine.gpus) else None
    upper = token.upper()
    if upper.startswith("MIG-GPU-"):  # MIG-GPU-<gpu uuid>/<gpu instance>/<compute instance>
        parent = _unique(machine, lambda g: [g.uuid], token[4:].split("/")[0])
        return (parent[0], token) if parent else None
    if upper.startswith("MIG-"):
        return _unique(machine, lambda g: g.mig_devices, token)
    if upper.startswith("GPU-"):
        return _unique(machine, lambda g: [g.uuid], token)
    return None


def _unique(machine: Machine, uuids, prefix: str) -> tuple[int, str | None] | None:
    """The one device whose UUID starts with `prefix`, as CUDA accepts a UUID prefix."""
    hits = [(pos, u) for pos, g in enumerate(machine.gpus) for u in uuids(g) if u.lower().startswith(prefix.lower())]
    if len(hits) != 1:
        return None
    pos, uuid = hits[0]
    return (pos, uuid if uuid.upper().startswith("MIG-") else None)


def inventory_check(
    machine: Machine,
    nproc: int,
    environ: dict[str, str],
    torch_build: tuple[str, str | None] | None = None,
    backend: str = "auto",
) -> CheckResult:
    """torch_build: (torch version, its CUDA version or None for a CPU build), None if unknown."""
    visible = visible_gpus(machine, environ.get("CUDA_VISIBLE_DEVICES"))
    job = visible.indices[:nproc]
    found = Findings()
    evidence = [
        f"driver {machine.driver_version}, supports CUDA "
        f"{driver_cuda_text(machine.cuda_driver_version)}; "
        f"{plural(len(machine.gpus), 'GPU')} on this host, {len(visible.indices)} visible, "
        f"{len(job)} used by {plural(nproc, 'process')} per node"
    ]
    if visible.note:
        evidence.append(visible.note)
    for pos, uuid in visible.mig.items():
        evidence.append(f"CUDA_VISIBLE_DEVICES names {uuid}, a MIG instance of {machine.gpus[pos].label}")
    if machine.unopened:
        evidence.append(
            f"NVML counts {plural(len(machine.unopened), 'more GPU')} that this process "
            "may not open (cgroup or scheduler device limits), left out: "
            + "; ".join(f"GPU{u['index']}: {u['error']}" for u in machine.unopened)
        )
    for pos, gpu in enumerate(machine.gpus):
        tag = "" if pos in job else "  (not used by this job)"
        evidence.append(_gpu_line(gpu) + tag)
    data = {
        "driver_version": machine.driver_version,
        "cuda_driver_version": machine.cuda_driver_version,
        "visible": visible.indices,
        "job_gpus": job,
        "gpus": [_gpu_data(g) for g in machine.gpus],
    }
    shown = environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""

    if not visible.indices and backend != "nccl":
        return CheckResult(
            GPU_INVENTORY, Status.SKIP, f"no GPU visible{where}: the job runs on CPU with gloo", evidence, data=data
        )
    if len(visible.indices) < nproc:
        found.add(
            Status.FAIL,
            f"{plural(len(visible.indices), 'GPU')} visible{where}, --nproc-per-node asks for {nproc}",
            f"use --nproc-per-node {len(visible.indices)} or make {nproc} GPUs visible",
        )

    used = [machine.gpus[i] for i in job]
    names = sorted({g.name for g in used})
    sized = [g for g in used if g.memory_total is not None]
    if len(names) > 1 or len({g.memory_total for g in sized}) > 1:
        smallest = min(sized or used, key=lambda g: g.memory_total or 0)
        card = f"{gb_label(smallest.memory_total)} card" if smallest.memory_total else "smallest card"
        found.add(
            Status.WARN,
            f"mixed GPUs ({', '.join(names)}): the batch must fit the {card}: the smallest sets the limit",
            "size the per-GPU batch for the smallest card, or use only identical GPUs",
        )
    if len({g.name for g in machine.gpus}) > 1 and environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        found.add(
            Status.WARN,
            "GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: "
            "CUDA numbers them fastest first, nvidia-smi and "
            "CUDA_VISIBLE_DEVICES indices by PCI bus, so cuda:N may not be "
            "the GPU you picked",
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID in the launch environment",
        )

    for gpu in used:
        status, line = _foreign(gpu)
        if line:
            found.add(status, line, "stop the processes holding GPU memory, or pick free GPUs with CUDA_VISIBLE_DEVICES")
        if gpu.mig_current == 1 and nproc > 1:
            found.add(
                Status.FAIL,
                f"{gpu.label} is in MIG mode: NCCL cannot run collectives across MIG instances",
                f"disable MIG (sudo nvidia-smi -i {gpu.index} -mig 0) before a multi-process job",
            )
        elif gpu.mig_pending is not None and gpu.mig_pending != gpu.mig_current:
            found.add(
                Status.WARN,
                f"{gpu.label} has a MIG mode change pending until the GPU is reset",
                f"reset {gpu.label} (sudo nvidia-smi -i {gpu.index} -r) or revert the pending MIG change",
            )
        if gpu.ecc_volatile_uncorrected:
            found.add(
                Status.WARN,
                f"{gpu.label} reports {gpu.ecc_volatile_uncorrected} uncorrected ECC errors since the driver loaded",
                f"drain the node and check {gpu.label} (nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER)",
            )

    torch_cuda = torch_build[1] if torch_build else None
    if used and torch_cuda:
        status, line, fix = cuda_compat(machine.driver_version, machine.cuda_driver_version, torch_cuda)
        evidence.append(line)
        if status is not Status.PASS:
            found.add(status, line, fix)
    elif used and torch_build:
        found.add(
            Status.WARN,
            f"torch {torch_build[0]} here is a CPU-only build: the GPUs will not be used",
            "install a CUDA build of torch (https://pytorch.org/get-started/locally/)",
        )

    if found.status is Status.PASS:
        size = f" ({gb_label(used[0].memory_total)})" if used[0].memory_total is not None else ""
        text = f"{len(job)} x {names[0]}{size} free for {plural(nproc, 'process')}"
    else:
        text = found.summary
    return CheckResult(GPU_INVENTORY, found.status, text, evidence, found.fix, data=data)


def _gpu_line(gpu) -> str:
    flags = [
        f"persistence {'on' if gpu.persistence_mode == 1 else 'off' if gpu.persistence_mode == 0 else '?'}",
        f"MIG {'on' if gpu.mig_current == 1 else 'off' if gpu.mig_current == 0 else 'n/a'}",
        "ECC n/a"
        if gpu.ecc_volatile_uncorrected is None
        else f"ECC uncorrected {gpu.ecc_volatile_uncorrected} (aggregate {gpu.ecc_aggregate_uncorrected})",
    ]
    procs = "".join(f"; pid {p.pid} {p.name or '?'} {mib(p.used_bytes)} ({p.kind})" for p in gpu.processes)
    memory = (
        f"{mib(gpu.memory_total)} total, {mib(gpu.memory_used)} used, {mib(gpu.memory_free)} free"
        if gpu.memory_total is not None
        else "memory not reported by NVML (a MIG-enabled GPU without privileges, or unified memory as on DGX Spark's GB10)"
    )
    return f"{gpu.label} {gpu.name} {gpu.uuid} bus {gpu.pci_bus_id}: {memory}; {', '.join(flags)}{procs}"


def _foreign(gpu) -> tuple[Status, str | None]:
    size = gpu.memory_total
    held = [
        p for p in gpu.processes if p.kind == "compute" or (size is not None and (p.used_bytes or 0) > GRAPHICS_TOLERATED * size)
    ]
    if not held:
        return Status.PASS, None
    total = sum(p.used_bytes or 0 for p in held)
    who = ", ".join(f"pid {p.pid} {p.name or '?'} {mib(p.used_bytes)}" for p in held)
    status = Status.FAIL if size is not None and total > FOREIGN_FAIL * size else Status.WARN
    free = f" ({mib(gpu.memory_free)} of {mib(size)} free)" if size is not None else ""
    return status, f"{gpu.label} is already in use: {who}{free}"


def _gpu_data(gpu) -> dict:
    return {
        "index": gpu.index,
        "name": gpu.name,
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "memory_total": gpu.memory_total,
        "memory_used": gpu.memory_used,
        "memory_free": gpu.memory_free,
        "persistence_mode": gpu.persistence_mode,
        "mig_mode": [gpu.mig_current, gpu.mig_pending],
        "ecc_uncorrected": [gpu.ecc_volatile_uncorrected, gpu.ecc_aggregate_uncorrected],
        "processes": [{"pid": p.pid, "name": p.name, "used_bytes": p.used_bytes, "kind": p.kind} for p in gpu.processes],
    }


def nvml_module_check(lacking: Sequence[str] = ()) -> CheckResult:
    """stack.nvml: `import pynvml` must load nvidia-ml-py, not the old `pynvml` distribution.

    Both install a module named pynvml; the old one (a package directory) wins the import and
    reports wrong NVLink counts on recent drivers. `lacking`: the NVML calls the loaded module
    has no wrapper for (the fields they read were left out, the other checks still ran).
    """
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None:
        return CheckResult(STACK_NVML, Status.SKIP, "nvidia-ml-py is not installed", fix="pip install nvidia-ml-py")
    origin = Path(spec.origin).resolve()
    owner = _owner(origin)
    missing = f"; it lacks {', '.join(lacking)}, so those reads were left out" if lacking else ""
    evidence = [str(origin)] + ([f"calls this pynvml lacks: {', '.join(lacking)}"] if lacking else [])
    reinstall = "pip install --force-reinstall nvidia-ml-py"
    if owner is None:
        return CheckResult(
            STACK_NVML,
            Status.WARN,
            f"the pynvml module at {origin} belongs to no installed distribution" + missing,
            evidence,
            fix=reinstall,
        )
    name, version = owner
    if name == "nvidia-ml-py" and not lacking:
        return CheckResult(STACK_NVML, Status.PASS, f"pynvml comes from nvidia-ml-py {version}", evidence)
    if name == "nvidia-ml-py":
        return CheckResult(
            STACK_NVML,
            Status.WARN,
            f"nvidia-ml-py {version} is older than the driver's NVML{missing}",
            evidence,
            fix="pip install --upgrade nvidia-ml-py",
        )
    return CheckResult(
        STACK_NVML,
        Status.WARN,
        f"`import pynvml` loads the stale `{name}` {version} distribution, not nvidia-ml-py "
        f"(wrong NVLink counts on recent drivers){missing}",
        evidence,
        fix=f"pip uninstall -y {name} && {reinstall}",
    )


def _owner(origin: Path) -> tuple[str, str] | None:
    """The distribution whose RECORD lists the loaded module file."""
    for name in ("nvidia-ml-py", "pynvml", "nvidia-ml-py3"):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.name in ("pynvml.py", "__init__.py") and Path(str(dist.locate_file(f))).resolve() == origin:
                return name, dist.version
    return None
