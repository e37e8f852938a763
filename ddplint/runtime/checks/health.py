"""gpu.health: whether the job's GPUs are fit for a long run, from what the driver keeps about
them (memory repairs waiting for a reset, clocks held down, compute mode, NVSwitch fabric).

gpu.inventory asks "are the GPUs there and free"; this check asks "will they stay fast and
correct for days". Each field NVML does not answer on a GPU (older or consumer GPUs have no row
remapper, PCIe cards no fabric) is left out, never guessed.
"""

from __future__ import annotations

from ddplint.runtime.checks.common import Findings, plural
from ddplint.runtime.nvml import Gpu, Machine
from ddplint.runtime.registry import GPU_HEALTH
from ddplint.runtime.verdict import CheckResult, Status

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
PROHIBITED = 2
EXCLUSIVE = (1, 3)
# nvmlClocksEventReason* bits that mean the GPU runs slower than it should, not by choice
# (idle, application clocks and a software power cap are choices or normal operation)
SLOWDOWNS = {
    0x8: "hardware slowdown",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
}
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}
FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 1, 2, 3
# persistence off on this many job GPUs or more: each process start reinitialises every GPU
PERSISTENCE_WARN_AT = 4
FABRIC_FIX = (
    "start the NVIDIA Fabric Manager of the driver's version (sudo systemctl enable "
    "--now nvidia-fabricmanager; `systemctl status nvidia-fabricmanager` says why it "
    "stopped): until it runs, CUDA fails with error 802 'system not yet initialized'"
)


def health_check(machine: Machine, job: list[int], nproc: int) -> CheckResult:
    """job: positions in machine.gpus of the GPUs the job uses; nproc: processes per node."""
    if not job:
        return CheckResult(GPU_HEALTH, Status.SKIP, "no GPU is used by this job")
    found = Findings()
    evidence = []
    for pos in job:
        gpu = machine.gpus[pos]
        evidence.append(_line(gpu))
        _memory_repairs(gpu, found)
        _clocks(gpu, found)
        _compute_mode(gpu, nproc > len(job), found)
        _fabric(gpu, found)
    off = [machine.gpus[p].label for p in job if machine.gpus[p].persistence_mode == 0]
    if len(off) >= PERSISTENCE_WARN_AT:
        found.add(
            Status.WARN,
            f"persistence mode is off on {plural(len(off), 'GPU')} "
            f"({', '.join(off)}): every process start reinitialises them "
            "(seconds each, and a start-up race between ranks)",
            "sudo nvidia-smi -pm 1, or run nvidia-persistenced",
        )
    data = {"gpus": {machine.gpus[p].label: _data(machine.gpus[p]) for p in job}}
    if not found.items:
        return CheckResult(
            GPU_HEALTH,
            Status.PASS,
            f"{plural(len(job), 'GPU')}: no pending memory repair, no clock slowdown, compute mode and fabric ready",
            evidence,
            data=data,
        )
    return CheckResult(GPU_HEALTH, found.status, found.summary, evidence, found.fix, data=data)


def _memory_repairs(gpu: Gpu, found: Findings) -> None:
    rows = gpu.health.remapped_rows
    query = f"nvidia-smi -i {gpu.index} -q -d ROW_REMAPPER,PAGE_RETIREMENT"
    if rows and rows.get("failure"):
        found.add(
            Status.FAIL,
            f"{gpu.label} failed to remap a memory row: its memory is no longer reliable",
            f"drain the node and replace {gpu.label} ({query})",
        )
    elif rows and rows.get("pending"):
        found.add(
            Status.WARN,
            f"{gpu.label} has memory row remappings pending until the GPU is reset",
            f"reset it before a long job (sudo nvidia-smi -r -i {gpu.index}, or reboot); {query}",
        )
    if gpu.health.retired_pages_pending == 1:
        found.add(
            Status.WARN,
            f"{gpu.label} has retired memory pages pending until the GPU is reset",
            f"reset it before a long job (sudo nvidia-smi -r -i {gpu.index}, or reboot); {query}",
        )


def _clocks(gpu: Gpu, found: Findings) -> None:
    events = gpu.health.clock_events or 0
    slow = [name for bit, name in SLOWDOWNS.items() if events & bit]
    if slow:
        found.add(
            Status.WARN,
            f"{gpu.label} runs below its clocks now ({', '.join(slow)}): every rank waits for the slowest GPU at each step",
            f"check its cooling and power (nvidia-smi -i {gpu.index} -q -d PERFORMANCE,TEMPERATURE,POWER)",
        )


def _compute_mode(gpu: Gpu, shared: bool, found: Findings) -> None:
    mode = gpu.health.compute_mode
    reset = f"sudo nvidia-smi -i {gpu.index} -c DEFAULT"
    if mode == PROHIBITED:
        found.add(Status.FAIL, f"{gpu.label} is in compute mode Prohibited: no process may use it", reset)
    elif mode in EXCLUSIVE and shared:
        found.add(
            Status.FAIL,
            f"{gpu.label} is in compute mode {COMPUTE_MODES[mode]}: one "
            "process per GPU, and this job puts more ranks than GPUs on the "
            "node",
            f"one rank per GPU, or {reset}",
        )


def _fabric(gpu: Gpu, found: Findings) -> None:
    fabric = gpu.health.fabric
    if not fabric:
        return
    state, status = fabric.get("state"), fabric.get("status")
    if state in (FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS):
        found.add(
            Status.FAIL,
            f"{gpu.label}'s NVLink fabric registration is "
            f"{FABRIC_STATES[state]}: the NVIDIA Fabric Manager is not running "
            "or has not finished",
            FABRIC_FIX,
        )
    elif state == FABRIC_COMPLETED and status:
        found.add(Status.FAIL, f"{gpu.label}'s NVLink fabric registration failed (NVML status {status})", FABRIC_FIX)


def _line(gpu: Gpu) -> str:
    h = gpu.health
    rows = h.remapped_rows
    mode = "n/a" if h.compute_mode is None else COMPUTE_MODES.get(h.compute_mode, "?")
    parts = [f"compute mode {mode}"]
    if rows is not None:
        parts.append(
            f"rows remapped {rows.get('correctable', 0) + rows.get('uncorrectable', 0)}"
            f" (pending {'yes' if rows.get('pending') else 'no'}, failure "
            f"{'yes' if rows.get('failure') else 'no'})"
        )
    if h.retired_pages_pending is not None:
        parts.append(f"retired pages pending {'yes' if h.retired_pages_pending else 'no'}")
    if h.clock_events is not None:
        parts.append(f"clock events {h.clock_events:#x}")
    if h.fabric:
        parts.append(f"fabric {FABRIC_STATES.get(h.fabric.get('state', -1), '?')}")
    return f"{gpu.label} {gpu.name}: {', '.join(parts)}"


def _data(gpu: Gpu) -> dict:
    h = gpu.health
    return {
        "compute_mode": h.compute_mode,
        "remapped_rows": h.remapped_rows,
        "retired_pages_pending": h.retired_pages_pending,
        "clock_events": h.clock_events,
        "fabric": h.fabric,
        "persistence_mode": gpu.persistence_mode,
    }
