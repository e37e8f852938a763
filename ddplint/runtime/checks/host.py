"""Host checks, run by the launcher before torchrun starts. No torch import, no GPU needed."""

from __future__ import annotations

import os

from ddplint.runtime.checks.common import plural
from ddplint.runtime.checks.env import launch_env_check
from ddplint.runtime.checks.gpu import inventory_check, nvml_module_check, visible_gpus
from ddplint.runtime.checks.health import health_check
from ddplint.runtime.checks.network import interconnect_check
from ddplint.runtime.checks.ports import port_check
from ddplint.runtime.checks.stack import installed_torch_cuda
from ddplint.runtime.checks.stale import stale_check
from ddplint.runtime.checks.topology import topology_check
from ddplint.runtime.gpucount import GpuCount
from ddplint.runtime.nodes import Nodes, rendezvous_address
from ddplint.runtime.nvml import (
    NvmlReadFailed,
    NvmlReads,
    NvmlUnavailable,
    load_machine,
    open_nvml,
    read_failed,
)
from ddplint.runtime.options import RuntimeOptions
from ddplint.runtime.registry import GPU_HEALTH, GPU_INVENTORY, GPU_TOPOLOGY
from ddplint.runtime.verdict import CheckResult, Status


def run_host_checks(
    options: RuntimeOptions,
    nproc: int,
    master_port: int,
    nvml: NvmlReads | None = None,
    environ: dict[str, str] | None = None,
    counted: GpuCount | None = None,
) -> list[CheckResult]:
    """gpu.inventory, gpu.topology, gpu.health, stack.nvml, env.port, env.stale, env.launch,
    net.interconnect.

    `nvml` replaces the real library (tests replay recorded machines through it); `counted`
    is who counted the GPUs, which names torch's count where NVML has none.
    """
    environ = dict(os.environ) if environ is None else environ
    results: list[CheckResult] = []
    machine = None
    job: list[int] = []
    try:
        machine = load_machine(nvml) if nvml is not None else _read_machine()
    except NvmlUnavailable as e:
        if counted is not None and counted.count:
            results.append(
                CheckResult(
                    GPU_INVENTORY,
                    Status.SKIP,
                    f"{e}: {plural(counted.count, 'GPU')} counted by {counted.source}; their "
                    "memory, processes and health are not checked",
                    fix="for the full check on NVIDIA GPUs, make libnvidia-ml visible "
                    "(NVIDIA_DRIVER_CAPABILITIES=compute,utility in a container)"
                    if "CUDA" in counted.source
                    else None,
                )
            )
        else:
            results.append(CheckResult(GPU_INVENTORY, Status.SKIP, str(e)))
        results.append(CheckResult(GPU_TOPOLOGY, Status.SKIP, str(e)))
        results.append(CheckResult(GPU_HEALTH, Status.SKIP, str(e)))
    except NvmlReadFailed as e:
        results.append(CheckResult(GPU_INVENTORY, Status.FAIL, str(e), fix=e.fix))
        results.append(CheckResult(GPU_TOPOLOGY, Status.SKIP, str(e)))
        results.append(CheckResult(GPU_HEALTH, Status.SKIP, str(e)))
    if machine is not None:
        inventory = inventory_check(machine, nproc, environ, installed_torch_cuda(), options.backend)
        results.append(inventory)
        job = visible_gpus(machine, environ.get("CUDA_VISIBLE_DEVICES")).indices[:nproc]
        results.append(topology_check(machine, job))
        results.append(health_check(machine, job, nproc))
    results.append(nvml_module_check(machine.lacking if machine else []))
    addr, port = rendezvous_address(options, master_port)
    record_port = Nodes.of(options, master_port).port if options.nnodes > 1 else None
    results.append(port_check(addr, port, options.node_rank, record_port))
    results.append(stale_check(machine, job, port, options.nnodes))
    results.append(launch_env_check(environ, nproc, options.nnodes))
    results.append(interconnect_check(environ, options.nnodes))
    return results


def _read_machine():
    reads = open_nvml()
    try:
        return load_machine(reads)
    except reads.error as e:
        raise read_failed(e) from None
    finally:
        reads.close()
