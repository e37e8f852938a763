"""The rank side of the machine checks, and their verdicts over all ranks.

The probe calls, in every rank: `collect_rank_info()` before the script runs,
`after_init_process_group()` right after the script's init_process_group returns (every rank
at the same point: it runs collectives), and `at_first_batch()` when the training loader
yields its first batch. Their dicts land in the rank record under "info", "comm" and
"binding"; the launcher passes all records to `rank_checks()`.
"""

from __future__ import annotations

import gc
import os
import socket
from typing import TYPE_CHECKING

from ddplint.runtime.checks.binding import binding_info, distinct_check
from ddplint.runtime.checks.comm import allreduce_check, bandwidth_check, measure
from ddplint.runtime.checks.consistency import consistent_check
from ddplint.runtime.checks.gpu import visible_gpus
from ddplint.runtime.checks.memory import estimate, fit_check, peak_check
from ddplint.runtime.checks.network import active_rates
from ddplint.runtime.checks.ranks import ranks_check
from ddplint.runtime.checks.stack import collect_versions, versions_check
from ddplint.runtime.checks.topology import expected_busbw
from ddplint.runtime.nvml import (
    NvmlReadFailed,
    NvmlUnavailable,
    load_machine,
    open_nvml,
    read_failed,
)
from ddplint.runtime.verdict import CheckResult

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

IDENTITY_VARS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "TORCHELASTIC_RUN_ID",
)


def nvml_view() -> dict:
    """Driver, visible GPUs and what their links allow, as NVML sees them from this rank."""
    try:
        reads = open_nvml()
    except (NvmlUnavailable, NvmlReadFailed) as exc:
        return {"error": str(exc)}
    try:
        machine = load_machine(reads)
    except reads.error as exc:
        return {"error": str(read_failed(exc))}
    finally:
        reads.close()
    visible = visible_gpus(machine, os.environ.get("CUDA_VISIBLE_DEVICES")).indices
    job = visible[: int(os.environ.get("LOCAL_WORLD_SIZE", len(visible)))]
    gbps, basis = expected_busbw(machine, job)
    return {
        "driver_version": machine.driver_version,
        "cuda_driver_version": machine.cuda_driver_version,
        "visible": len(visible),
        "uuids": [machine.gpus[i].uuid for i in visible],
        "gpus": [{"name": machine.gpus[i].name, "capability": machine.gpus[i].compute_capability} for i in visible],
        "expected_busbw_gbps": gbps,
        "basis": basis,
    }


def collect_rank_info() -> dict:
    info = {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "env": {k: os.environ[k] for k in IDENTITY_VARS if k in os.environ},
        "versions": collect_versions(),
    }
    if os.environ.get("LOCAL_RANK", "0") == "0":  # one NVML read per node is enough
        info["nvml"] = nvml_view()
        info["nics_gbps"] = active_rates()
    return info


def after_init_process_group(phase=None) -> dict:
    return measure(phase)


def _subclasses(cls: type) -> set[type]:
    out: set[type] = {cls}
    todo: list[type] = [cls]
    while todo:
        subclasses: list[type] = todo.pop().__subclasses__()
        for sub in subclasses:
            if sub not in out:
                out.add(sub)
                todo.append(sub)
    return out


def live_instances(*classes: type) -> list[list]:
    """The live objects of each class (subclasses included), from the garbage collector.

    Membership of type(o) in the set of known subclasses keeps the pass over ~10^5 objects in
    C-speed territory, and never reads o.__class__ (some torch proxies warn when it is read).
    """
    kinds = [_subclasses(c) for c in classes]
    wanted = set().union(*kinds)
    hits = [o for o in gc.get_objects() if type(o) in wanted]
    return [[o for o in hits if type(o) in k] for k in kinds]


def at_first_batch() -> dict:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    models, optimizers, modules, tensors = live_instances(
        DistributedDataParallel, torch.optim.Optimizer, torch.nn.Module, torch.Tensor
    )
    out = binding_info(models, modules, tensors)
    out["model"] = estimate(models, optimizers)
    return out


def rank_checks(
    records: list[RankRecord], log_tail: str | None = None, trained: list[RankRecord] | None = None
) -> list[CheckResult]:
    """Every rank-side verdict; `log_tail` (torchrun's output) lets a stall quote NCCL's last line.
    The environment is torchrun's processes'; the process group, devices and memory are those
    of the processes that trained, `trained` when the script started workers of its own."""
    trained = trained or records
    return [
        versions_check(records),
        consistent_check(records),
        ranks_check(records),
        distinct_check(trained),
        allreduce_check(trained, log_tail),
        bandwidth_check(trained),
        fit_check(trained),
        peak_check(trained),
    ]
