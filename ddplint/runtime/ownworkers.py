"""Worker processes that a rank starts itself (`mp.spawn`, `torch.multiprocessing.start_processes`).

The probe runs in the processes torchrun starts. A script that starts its own workers
(pytorch/examples' imagenet with --multiprocessing-distributed) trains in them. What a worker
needs to run as it would on the machine it was written for follows it there: the CUDA-to-CPU
mapping and the forced backend, so that no failure of the audit's own making is reported; and
the audit's step limit, so that the workers stop after as many epochs as the ranks would
instead of training until the timeout.

The workers of rank 0 are audited as the ranks of the job they form (probe.WorkerProbe: data,
writes, steps, checkpoints), each writing its record beside torchrun's. Other ranks' workers
(the script started under torchrun with several processes per node, each spawning a job of its
own) only run within the limits. Every rank records how many workers it started, and every
worker adds its stack to its rank's when the audit times out.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import inspect
import os
import signal
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSettings:
    """What a worker installs before the script's function runs (picklable: it travels to a
    spawned interpreter)."""

    local_world: int | None  # map CUDA to the CPU with this many local GPUs; None: leave CUDA alone
    backend: str | None  # the backend every init_process_group gets; None: the script's own
    steps: int
    epochs: int
    rundir: str | None  # where an audited worker writes its record; None: not audited
    stacks: str  # the spawning rank's stack file, where a worker appends its dump on SIGUSR1


def force_backend(args: list, kwargs: dict, backend: str) -> None:
    """Make an init_process_group call's arguments ask for `backend` (gloo takes no device_id)."""
    if args:
        args[0] = backend
    else:
        kwargs["backend"] = backend
    if backend == "gloo":
        kwargs.pop("device_id", None)


def replace_init_process_group(wrap, fn) -> None:
    """Make `torch.distributed.init_process_group` the function `wrap` makes of it, also where
    the script holds it by a name of its own: a spawned worker imports the script to unpickle
    `fn`, the function it runs, so the script's `from torch.distributed import
    init_process_group` bound the original before the worker could patch it. (multiprocessing
    runs the script as `__mp_main__` and keeps a copy of its names: `fn` reads the originals.)"""
    import torch.distributed as dist

    original = dist.init_process_group
    patched = wrap(original)
    dist.init_process_group = patched
    namespaces: list[dict] = [vars(module) for module in list(sys.modules.values()) if _the_scripts(module)]
    namespaces.append(getattr(inspect.unwrap(fn), "__globals__", {}))
    for names in namespaces:
        for name, value in list(names.items()):
            if value is original:
                names[name] = patched


def _the_scripts(module) -> bool:
    """A module of the script or its libraries (not torch's own, nor ddplint's)."""
    has_names = hasattr(module, "__dict__") and isinstance(getattr(module, "__name__", None), str)
    return has_names and module.__name__.partition(".")[0] not in ("torch", "ddplint")


def follow(settings: WorkerSettings, on_start) -> None:
    """Make every worker the script starts through torch.multiprocessing install `settings`
    first; `on_start(nprocs)` is told of each start."""
    import torch.multiprocessing as tmp

    spawn_module = importlib.import_module("torch.multiprocessing.spawn")  # the package's `spawn` is the function

    original = spawn_module.start_processes

    def start_processes(fn, args=(), nprocs=1, *rest, **kwargs):
        on_start(nprocs)
        return original(functools.partial(_worker, settings, fn), args, nprocs, *rest, **kwargs)

    spawn_module.start_processes = start_processes  # type: ignore[attr-defined]  # what mp.spawn calls
    tmp.start_processes = start_processes


def _worker(settings: WorkerSettings, fn, index: int, *args) -> None:
    import torch.distributed as dist

    # the hang report signals the ranks' children for their stacks: a spawned interpreter would
    # die of SIGUSR1, so each worker appends its dump to its rank's (as a forked one does)
    stacks = open(settings.stacks, "a")  # noqa: SIM115 - faulthandler writes there until exit
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)

    from ddplint.runtime.dataprobe import AuditStop, LoaderTracker
    from ddplint.runtime.sites import plumbing_dirs, torch_dirs

    # the workers meet where the script tells them (`tcp://...`), as when it is started by hand:
    # under torchrun's agent-store flag a worker would wait for a store nobody serves
    os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    if settings.local_world is not None:
        from ddplint.runtime import cpucuda

        cpucuda.install(settings.local_world)
    if settings.rundir is not None:
        from ddplint.runtime.probe import WorkerProbe
        from ddplint.runtime.rundir import RunDir

        WorkerProbe(RunDir(settings.rundir), index, settings.backend).run_function(fn, index, args)
        return
    if settings.backend is not None:
        backend = settings.backend

        def forcing(original):
            def init_process_group(*call_args, **kwargs):
                call_args_list = list(call_args)
                force_backend(call_args_list, kwargs, backend)
                return original(*call_args_list, **kwargs)

            return init_process_group

        replace_init_process_group(forcing, fn)
    tracker = LoaderTracker(settings.steps, settings.epochs, plumbing_dirs() + torch_dirs(), _quiet, _quiet)
    tracker.install()
    try:
        fn(index, *args)
    except AuditStop:  # the audit's limit, not the script's failure: every worker stops at the
        if dist.is_available() and dist.is_initialized():  # same batch; none leaves a peer waiting
            dist.barrier()
            dist.destroy_process_group()


def _quiet(*_args, **_kwargs) -> None:
    """A worker publishes no phase of its own: the launcher follows torchrun's ranks."""
