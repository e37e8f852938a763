"""CUDA mapped to the CPU: audit a GPU training script on a machine without a GPU, unedited.

The data and I/O audit needs no GPU, and most distributed entry scripts place their model and
tensors on CUDA. On a machine without one (or with `--device cpu`) each rank runs under this
mapping: `torch.cuda` answers as if the rank's local GPUs were there, every device argument
that names CUDA (`.cuda()`, `.to("cuda:1")`, `device=`, an int index, `torch.device("cuda",
i)`) is taken to the CPU by a torch function mode, DDP and FSDP drop their `device_ids`,
pinned memory is off, and nccl becomes gloo (see the probe's backend forcing).

What each rank *asked for* is kept (`Asked`): the index `set_device` was given and the CUDA
indices its tensors and modules were sent to, so `bind.distinct` still finds every rank on
`cuda:0`.
"""

from __future__ import annotations

import os
import sys
import types
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Asked:
    """The CUDA devices the script asked for, as indices on this node."""

    set_device: int | None = None
    placed: Counter = field(default_factory=Counter)  # CUDA index -> tensors/modules sent there
    ddp_device_ids: list[int] = field(default_factory=list)

    def index(self) -> int | None:
        """The GPU this rank would drive: DDP's device_ids, else where most was placed, else
        the set_device index."""
        if self.ddp_device_ids:
            return self.ddp_device_ids[0]
        if self.placed:
            return self.placed.most_common(1)[0][0]
        return self.set_device

    def as_record(self) -> dict:
        return {
            "set_device": self.set_device,
            "placed": dict(self.placed),
            "ddp_device_ids": self.ddp_device_ids,
            "index": self.index(),
        }


ACTIVE: Asked | None = None  # set in a rank whose CUDA is mapped to the CPU


def _cuda_index(device: Any, asked: Asked) -> int | None:
    """The CUDA index a device argument names, or None when it is not CUDA."""
    import torch

    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        if not device.startswith("cuda"):
            return None
        device = torch.device(device)
    if isinstance(device, torch.device) and device.type == "cuda":
        return device.index if device.index is not None else (asked.set_device or 0)
    return None


class _OnCpu:
    """Builds the torch function mode (a class of torch's, imported only when mapping)."""

    @staticmethod
    def mode(asked: Asked):
        import torch
        from torch.overrides import TorchFunctionMode

        to_cpu = {torch.Tensor.cuda}
        # where a positional device sits: Tensor.to(self, device, ...), and Module.to's parser
        device_at = {torch.Tensor.to: 1, torch._C._nn._parse_to: 0}

        class CudaOnCpu(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                if func in to_cpu:
                    index = _cuda_index(args[1] if len(args) > 1 else kwargs.get("device", "cuda"), asked)
                    asked.placed[index if index is not None else 0] += 1
                    return args[0]
                if func is torch.Tensor.pin_memory:
                    return args[0]
                if "device" in kwargs:
                    index = _cuda_index(kwargs["device"], asked)
                    if index is not None:
                        asked.placed[index] += 1
                        kwargs["device"] = "cpu"
                at = device_at.get(func)
                if at is not None and len(args) > at:
                    index = _cuda_index(args[at], asked)
                    if index is not None:
                        asked.placed[index] += 1
                        args = (*args[:at], "cpu", *args[at + 1 :])
                if kwargs.get("pin_memory"):
                    kwargs["pin_memory"] = False  # pinning needs a GPU
                return func(*args, **kwargs)

        return CudaOnCpu()


def _fake_cuda(asked: Asked, local_world: int) -> dict[str, Any]:
    """torch.cuda's answers for a node with `local_world` GPUs."""

    def set_device(device):
        index = _cuda_index(device, asked)
        asked.set_device = index if index is not None else asked.set_device

    def current_device() -> int:
        return asked.set_device or 0

    def properties(device=None):
        return types.SimpleNamespace(
            name="CPU (CUDA mapped by ddplint)",
            major=8,
            minor=0,
            total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            multi_processor_count=os.cpu_count() or 1,
        )

    # a function object of its own per name: torch.compile keeps rules per torch function, by identity
    def nothing():
        return lambda *args, **kwargs: None

    def zero():
        return lambda *args, **kwargs: 0

    def cpu_state(*args, **kwargs):
        import torch

        return torch.get_rng_state()

    # (torch.cuda's own code reads these names from the same module: is_initialized stays
    # False, so nothing lazily initialises a CUDA runtime this build does not have)
    return {
        "is_available": lambda: True,
        "device_count": lambda: local_world,
        "manual_seed": nothing(),
        "manual_seed_all": nothing(),
        "seed": nothing(),
        "seed_all": nothing(),
        "get_rng_state": cpu_state,
        "get_rng_state_all": lambda: [cpu_state()] * local_world,
        "set_rng_state": nothing(),
        "set_rng_state_all": nothing(),
        "set_device": set_device,
        "current_device": current_device,
        "get_device_name": lambda device=None: properties().name,
        "get_device_properties": properties,
        "get_device_capability": lambda device=None: (8, 0),
        "is_bf16_supported": lambda *a, **k: True,
        "synchronize": nothing(),
        "empty_cache": nothing(),
        "ipc_collect": nothing(),
        "reset_peak_memory_stats": nothing(),
        "reset_max_memory_allocated": nothing(),
        "memory_allocated": zero(),
        "max_memory_allocated": zero(),
        "memory_reserved": zero(),
        "max_memory_reserved": zero(),
    }


def _outside_torch(fake: Callable, real: Callable, torch_dir: str) -> Callable:
    """`fake` for the script and its libraries, `real` for torch's own code: torch consults the
    same functions (an optimizer's stream-capture check, autocast, GradScaler) and must keep
    seeing the machine as it is, or it would reach for a CUDA runtime this build lacks."""

    def answer(*args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        return (real if caller.startswith(torch_dir) else fake)(*args, **kwargs)

    return answer


def install(local_world: int) -> Asked:
    """Map CUDA to the CPU in this process for the rest of its life; returns what it records."""
    import torch
    import torch.nn.parallel as parallel
    import torch.utils.data as data

    global ACTIVE
    asked = ACTIVE = Asked()
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    for name, fn in _fake_cuda(asked, local_world).items():
        setattr(torch.cuda, name, _outside_torch(fn, getattr(torch.cuda, name), torch_dir))
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        for name, fn in (
            ("is_available", lambda: True),
            ("device_count", lambda: local_world),
            ("current_accelerator", lambda *a, **k: torch.device("cuda")),
            ("set_device_index", torch.cuda.set_device),
            ("set_device_idx", torch.cuda.set_device),
            ("current_device_index", torch.cuda.current_device),
            ("current_device_idx", torch.cuda.current_device),
        ):
            if hasattr(accelerator, name):
                setattr(accelerator, name, _outside_torch(fn, getattr(accelerator, name), torch_dir))

    ddp_init = parallel.DistributedDataParallel.__init__

    def ddp(self, module, device_ids=None, output_device=None, *args, **kwargs):
        asked.ddp_device_ids = [i for i in (_cuda_index(d, asked) for d in device_ids or ()) if i is not None]
        ddp_init(self, module, None, None, *args, **kwargs)

    parallel.DistributedDataParallel.__init__ = ddp  # type: ignore[method-assign]

    loader_init = data.DataLoader.__init__

    def loader(self, *args, **kwargs):
        kwargs["pin_memory"] = False
        loader_init(self, *args, **kwargs)

    data.DataLoader.__init__ = loader  # type: ignore[method-assign]
    _OnCpu.mode(asked).__enter__()  # for the rest of the process (forked DataLoader workers too)
    return asked
