"""How many GPUs the job can use here, and who counted them, before torchrun starts.

NVML answers without importing torch, so it counts first. Where NVML cannot (AMD GPUs under
ROCm, whose torch.cuda is HIP and whose nccl backend is RCCL; a container that mounts libcuda
but not libnvidia-ml, NVIDIA_DRIVER_CAPABILITIES=compute) while GPU device nodes are there,
a short subprocess asks torch. A CPU machine has no such node and never pays for the import.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from dataclasses import dataclass

TORCH_TIMEOUT_S = 120.0  # importing torch on a loaded machine can take tens of seconds
_ASK_TORCH = (
    "import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() "
    "else 0; print(json.dumps([n, torch.version.hip]))"
)


@dataclass(frozen=True)
class GpuCount:
    count: int  # GPUs the job can use on this node
    source: str  # who counted: "NVML", "torch (CUDA)", "torch (ROCm/HIP)", or "" for none
    broken: str | None = None  # why GPUs that are there cannot be used (a broken driver)


def gpu_device_nodes(dev: str = "/dev") -> list[str]:
    """Device nodes of a GPU runtime: /dev/kfd (ROCm), /dev/nvidia0... (NVIDIA)."""
    return sorted(glob.glob(os.path.join(dev, "kfd")) + glob.glob(os.path.join(dev, "nvidia[0-9]*")))


def count_gpus(environ: dict[str, str], dev: str = "/dev") -> GpuCount:
    try:
        from ddplint.runtime.checks.gpu import visible_gpus
        from ddplint.runtime.nvml import (
            NvmlReadFailed,
            NvmlUnavailable,
            load_machine,
            open_nvml,
            read_failed,
        )
    except ImportError:  # the runtime extra is not installed
        return GpuCount(0, "")
    try:
        reads = open_nvml()
    except NvmlUnavailable:
        return torch_gpu_count() if gpu_device_nodes(dev) else GpuCount(0, "")
    except NvmlReadFailed as e:
        return GpuCount(0, "NVML", str(e))
    try:
        machine = load_machine(reads)
    except reads.error as e:
        return GpuCount(0, "NVML", str(read_failed(e)))
    finally:
        reads.close()
    return GpuCount(len(visible_gpus(machine, environ.get("CUDA_VISIBLE_DEVICES")).indices), "NVML")


def torch_gpu_count(python: str = sys.executable, timeout: float = TORCH_TIMEOUT_S) -> GpuCount:
    """The GPUs torch sees (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES honoured by torch itself)."""
    try:
        out = subprocess.run([python, "-c", _ASK_TORCH], capture_output=True, text=True, timeout=timeout)
        count, hip = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError, TypeError):
        return GpuCount(0, "")
    return GpuCount(int(count), "torch (ROCm/HIP)" if hip else "torch (CUDA)") if count else GpuCount(0, "")
