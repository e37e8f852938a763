"""The vocabulary of the analysis: what a value holds, what a device expression names, and the
names by which launchers, torch and common libraries spell them.

Every question of the form "does this hold a rank?" is answered from here: the tables below are
the documented names of launchers and libraries (torchrun's environment, torch.distributed's
calls, the Hugging Face and Lightning predicates), not the names of any one project. A
project's own helpers are read from its code instead (guards.py, context.py).
"""

from __future__ import annotations

import re
from enum import Enum


class Role(Enum):
    """What a value holds, as far as distribution is concerned."""

    GLOBAL_RANK = "global rank"  # unique over all nodes: RANK, dist.get_rank()
    LOCAL_RANK = "local rank"  # unique on one node: LOCAL_RANK, rank % device_count()
    WORLD_SIZE = "world size"
    MAIN_FLAG = "main-process flag"  # true on the main process only: rank == 0
    LOCAL_DEVICE = "local device"  # a device of this rank's own: torch.device("cuda", local_rank)


RANKS = frozenset({Role.GLOBAL_RANK, Role.LOCAL_RANK})
PER_NODE = frozenset({Role.LOCAL_RANK, Role.LOCAL_DEVICE})
# what a field of a record keeps of its value's role (a device is reported where it is built)
FIELD_ROLES = RANKS | {Role.MAIN_FLAG, Role.WORLD_SIZE}


class DeviceKind(Enum):
    """What a device expression names."""

    INDEX = "hard-coded index"  # "cuda:0", .cuda(0)
    BARE = "current device"  # "cuda", .cuda(): whatever set_device chose, GPU 0 without it
    GLOBAL = "global rank"  # the index is the global rank
    LOCAL = "local rank"  # the index is this process's own GPU
    OTHER = "other"  # "cpu", a parameter, an unknown value


# Environment variables set by launchers (torchrun, SLURM, Open MPI, Intel MPI).
ENV_ROLES = {
    "LOCAL_RANK": Role.LOCAL_RANK,
    "SLURM_LOCALID": Role.LOCAL_RANK,
    "MPI_LOCALRANKID": Role.LOCAL_RANK,
    "OMPI_COMM_WORLD_LOCAL_RANK": Role.LOCAL_RANK,
    "RANK": Role.GLOBAL_RANK,
    "SLURM_PROCID": Role.GLOBAL_RANK,
    "OMPI_COMM_WORLD_RANK": Role.GLOBAL_RANK,
    "WORLD_SIZE": Role.WORLD_SIZE,
    "LOCAL_WORLD_SIZE": Role.WORLD_SIZE,
    "SLURM_NTASKS": Role.WORLD_SIZE,
}
# torch.distributed calls, by what they return.
CALL_ROLES = {
    "torch.distributed.get_rank": Role.GLOBAL_RANK,
    "torch.distributed.get_global_rank": Role.GLOBAL_RANK,
    "torch.distributed.get_node_local_rank": Role.LOCAL_RANK,
    "torch.distributed.get_world_size": Role.WORLD_SIZE,
    # MPI's rank and size, for jobs launched with mpiexec/srun that start the group from them
    "mpi4py.MPI.COMM_WORLD.Get_rank": Role.GLOBAL_RANK,
    "mpi4py.MPI.COMM_WORLD.Get_size": Role.WORLD_SIZE,
}
# Names whose meaning is unambiguous in training code (torchrun's variables spelled in lower
# case, nanoGPT's, accelerate's and Lightning's attributes).
NAME_ROLES = {
    "local_rank": Role.LOCAL_RANK,
    "ddp_local_rank": Role.LOCAL_RANK,
    "localrank": Role.LOCAL_RANK,
    "local_process_index": Role.LOCAL_RANK,
    "world_size": Role.WORLD_SIZE,
    "ddp_world_size": Role.WORLD_SIZE,
    "master_process": Role.MAIN_FLAG,
    "is_master": Role.MAIN_FLAG,
    "is_main_process": Role.MAIN_FLAG,
    "is_main": Role.MAIN_FLAG,
    "main_process": Role.MAIN_FLAG,
    "is_rank_zero": Role.MAIN_FLAG,
    "is_global_zero": Role.MAIN_FLAG,
    "is_local_main_process": Role.MAIN_FLAG,
}
# Names that hold some rank, global or local; enough to read `if rank == 0:`.
RANK_NAMES = frozenset(
    {"rank", "global_rank", "ddp_rank", "world_rank", "rank_id", "proc_id", "process_index", "gpu", "gpu_id", "device_id"}
)
# Calls that return some rank, by the last part of their name (`utils.get_rank()`).
RANK_CALLS = frozenset({"get_rank", "get_local_rank", "get_global_rank", "get_node_local_rank"})
# torch.distributed's naming, followed by the model-parallel libraries for the rank within a
# group: get_data_parallel_rank(), get_tensor_model_parallel_rank(), ...
GROUP_RANK_CALL = re.compile(r"get_(?:\w+_)?rank")
# The option torch.distributed.launch passes to every process (and torchrun with --use-env off).
LOCAL_RANK_FLAGS = frozenset({"--local_rank", "--local-rank"})
WORLD_NAMES = frozenset({"world_size", "ddp_world_size", "num_gpus", "ngpus", "n_gpus", "get_world_size"})

# Predicates by the last part of their name: `utils.is_main_process()`, `accelerator.is_main_process`,
# the Hugging Face Trainer's `is_world_process_zero()`.
MAIN_PREDICATES = frozenset(
    {
        "is_main_process",
        "is_local_main_process",
        "is_master",
        "is_main",
        "is_rank_zero",
        "is_rank0",
        "is_global_zero",
        "is_local_zero",
        "master_process",
        "main_process",
        "is_leader",
        "is_chief",
        "is_primary",
        "is_global_primary",
        "is_local_primary",
        "is_world_process_zero",
        "is_local_process_zero",
    }
)
# Decorators that run the function on the main process only.
MAIN_DECORATORS = frozenset(
    {
        "rank_zero_only",
        "main_process_only",
        "on_main_process",
        "on_local_main_process",
        "master_only",
        "rank0_only",
        "on_rank_zero",
        "only_main_process",
        "main_only",
    }
)
# Flags and calls that say "this run is distributed", where the script gives no better evidence
# (the flag its process group starts under, guards.py).
DIST_FLAGS = frozenset(
    {
        "distributed",
        "ddp",
        "is_distributed",
        "use_ddp",
        "multiprocessing_distributed",
        "use_distributed",
        "is_initialized",
        "is_dist_avail_and_initialized",
        "is_dist_initialized",
        "dist_initialized",
    }
)


def last_part(name: str) -> str:
    return name.rsplit(".", 1)[-1]
