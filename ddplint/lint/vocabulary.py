"""The library APIs ddplint knows by name: torch's distributed, device, data and checkpoint calls,
and the frameworks, launchers and writers around them. Every name is the canonical qualified one
(`names.CANONICAL` maps the other public spellings onto it)."""

from __future__ import annotations

import re

# Public spellings of the same object, mapped to one canonical qualified name.
CANONICAL = {
    "torch.nn.parallel.distributed.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.DistributedDataParallel": "torch.nn.parallel.DistributedDataParallel",
    "torch.utils.data.distributed.DistributedSampler": "torch.utils.data.DistributedSampler",
    "torch.utils.data.dataloader.DataLoader": "torch.utils.data.DataLoader",
    "torch.distributed.distributed_c10d.init_process_group": "torch.distributed.init_process_group",
    "torch.distributed.distributed_c10d.destroy_process_group": "torch.distributed.destroy_process_group",
    "torch.distributed.distributed_c10d.get_rank": "torch.distributed.get_rank",
    "torch.multiprocessing.spawn.spawn": "torch.multiprocessing.spawn",
    "torch.cuda.device": "torch.cuda.device",
}

DIST = "torch.distributed"

DDP = "torch.nn.parallel.DistributedDataParallel"

SAMPLER = "torch.utils.data.DistributedSampler"

SPAWN = {"torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"}

# torch.distributed calls that a single-process script makes too: reading or writing the DCP
# checkpoint format, asking whether a process group exists.
NOT_DISTRIBUTED = ("torch.distributed.checkpoint.", "torch.distributed.is_available", "torch.distributed.is_initialized")

# Inter-process file locks: the block runs in one process at a time.
FILE_LOCKS = frozenset({"filelock.FileLock", "filelock.SoftFileLock", "filelock.UnixFileLock"})
# An exclusive lock of the operating system on an open file: `fcntl.flock(f, fcntl.LOCK_EX)`.
OS_LOCKS = frozenset({"fcntl.flock", "fcntl.lockf"})

# Whether a path is there: `if not os.path.exists(d): os.makedirs(d)` makes it only when missing.
EXISTENCE_CHECKS = frozenset({"os.path.exists", "os.path.isdir"})

# Reads of a remote file: a file opened beside one in a `with` receives the download, the same
# bytes on every rank (a cache fill), not a log of the run.
NETWORK_READS = frozenset({"urllib.request.urlopen", "requests.get", "requests.request"})

# Context managers that make a GPU the current device inside their block.
DEVICE_CONTEXTS = frozenset({"torch.cuda.device", "torch.cuda.device_of"})

# Model-parallel RPC: workers with different roles, each placing its own modules on devices.
RPC = ("torch.distributed.rpc.", "torch.distributed.autograd.", "torch.distributed.optim.")

INIT_PG = "torch.distributed.init_process_group"

SET_DEVICE = "torch.cuda.set_device"

# Calls that every rank of the group must reach, in the same order.
COLLECTIVES = frozenset(
    f"{DIST}.{name}"
    for name in (
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "gather",
        "scatter",
        "all_to_all",
        "all_to_all_single",
        "all_gather_object",
        "broadcast_object_list",
        "gather_object",
        "scatter_object_list",
        "send",
        "recv",
        "isend",
        "irecv",
        "new_group",
    )
) | {DDP}

# Frameworks that own process groups, samplers and device placement, by the package (or, for a
# library whose training loop is one thing and its distribution another, the subpackage) that
# does it: Ignite's Engine is a loop; ignite.distributed starts the group and places the model.
ACCELERATE = "accelerate"
DEEPSPEED = "deepspeed"
FRAMEWORK_IMPORTS = {
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "lightning_fabric": "lightning",
    "accelerate": ACCELERATE,
    "deepspeed": DEEPSPEED,
    "ignite.distributed": "ignite",
    "colossalai": "colossalai",
    "jax": "jax",  # JAX/Flax training: its own processes and devices, not torch.distributed
    "flax": "jax",
}

# What takes the distributed run over where a framework is imported: its runner object. A script
# that starts its process group itself and builds none of these only borrows the framework's
# utilities (`from accelerate import init_empty_weights`).
FRAMEWORK_RUNNERS = frozenset(
    {
        "accelerate.Accelerator",
        "accelerate.PartialState",
        "lightning.Trainer",
        "lightning.Fabric",
        "lightning.pytorch.Trainer",
        "lightning.fabric.Fabric",
        "lightning_fabric.Fabric",
        "pytorch_lightning.Trainer",
        "deepspeed.initialize",
        "deepspeed.init_distributed",
        "ignite.distributed.Parallel",
        "colossalai.launch",
        "colossalai.launch_from_torch",
    }
)

# PyTorch's own distributed test harness spawns the processes, builds the group and binds
# each process to its device before a test method runs.
FRAMEWORK_MODULES = (
    "torch.testing._internal.common_distributed",
    "torch.testing._internal.common_fsdp",
    "torch.testing._internal.distributed",
)

TRAINER = "transformers"

FRAMEWORK_CALLS = {
    "transformers.Trainer": TRAINER,
    "transformers.Seq2SeqTrainer": TRAINER,
    "trl.SFTTrainer": TRAINER,
}

# Process classes a script starts its own workers with, one per rank (no torchrun).
# (DGL's wrapper of the module is documented to be used exactly like it)
PROCESS_CLASSES = frozenset({"multiprocessing.Process", "torch.multiprocessing.Process", "dgl.multiprocessing.Process"})
# Start-method contexts, whose `.Process` is the same class: `mp = multiprocessing.get_context("spawn")`.
PROCESS_CONTEXTS = frozenset({"multiprocessing.get_context", "torch.multiprocessing.get_context"})

# Command-line runners that call the function they are handed once per process: under torchrun,
# on every rank (`app.run(main)`, `fire.Fire(main)`, `typer.run(main)`), by the keyword each
# names its function with.
ENTRY_RUNNERS = {"absl.app.run": "main", "fire.Fire": "component", "typer.run": "function"}

# Job schedulers whose executors run the submitted function in every task of the job
# (`executor.submit(train, cfg)` with `executor = submitit.AutoExecutor(...)`).
EXECUTORS = frozenset({"submitit.AutoExecutor", "submitit.SlurmExecutor", "submitit.LocalExecutor"})

DESTROY_PG = f"{DIST}.destroy_process_group"

POINT_TO_POINT = frozenset(f"{DIST}.{name}" for name in ("send", "recv", "isend", "irecv"))

FSDP = f"{DIST}.fsdp.FullyShardedDataParallel"

DCP = f"{DIST}.checkpoint"

# Saves and state-dict gathers that every rank has to take part in.
COLLECTIVE_SAVES = frozenset(
    {
        f"{DCP}.save",
        f"{DCP}.save_state_dict",
        f"{DCP}.async_save",
        f"{DCP}.state_dict_saver.save",
        f"{DCP}.state_dict.get_model_state_dict",
        f"{DCP}.state_dict.get_optimizer_state_dict",
        f"{DCP}.state_dict.get_state_dict",
        f"{FSDP}.state_dict_type",
        f"{FSDP}.full_optim_state_dict",
        f"{FSDP}.optim_state_dict",
        f"{FSDP}.sharded_optim_state_dict",
        f"{FSDP}.summon_full_params",
    }
)

BLOCKING = (COLLECTIVES - POINT_TO_POINT) | COLLECTIVE_SAVES

# mpi4py's collective methods of a communicator (`MPI.COMM_WORLD.Barrier()`, `comm.allreduce(x)`).
MPI = "mpi4py.MPI."

MPI_COLLECTIVES = frozenset(
    {
        "barrier",
        "Barrier",
        "bcast",
        "Bcast",
        "allreduce",
        "Allreduce",
        "reduce",
        "Reduce",
        "gather",
        "Gather",
        "allgather",
        "Allgather",
        "scatter",
        "Scatter",
        "alltoall",
        "Alltoall",
        "reduce_scatter",
        "Reduce_scatter",
    }
)

# Collectives that run an NCCL operation on the current GPU; new_group only meets at the store,
# and monitored_barrier is gloo's.
ON_DEVICE = COLLECTIVES - {f"{DIST}.new_group", f"{DIST}.monitored_barrier"}

WRAPPERS = frozenset({DDP, FSDP, f"{DIST}.fsdp.fully_shard", f"{DIST}._composable.fsdp.fully_shard"})
# torch.nn.Module methods that return the module itself: `DDP(net).to(device)` is still the wrapper.
MODULE_RETURNS_ITSELF = frozenset(
    {"to", "cuda", "cpu", "train", "eval", "float", "half", "double", "bfloat16", "type", "requires_grad_", "apply"}
)

# Calls that bind the process to the device they are given.
SET_DEVICE_CALLS = frozenset({SET_DEVICE, "torch.accelerator.set_device_index", "torch.xpu.set_device"})

# Other libraries' functions that start the process group of a launched process, as
# init_process_group would (nccl unless told otherwise); they also bind its device (BINDING).
LIBRARY_GROUP_STARTS = frozenset(
    {"mmcv.runner.init_dist", "mmcv.runner.dist_utils.init_dist", "mmengine.dist.init_dist", "mmengine.dist.utils.init_dist"}
)

# Launchers of other libraries that bind the device of the process they start, and the device
# mesh (it binds rank % devices-per-host when nothing is bound yet). `with torch.cuda.device(i):`
# binds inside its block only (devices.binding_sites), so it is no effect of the function.
BINDING = SET_DEVICE_CALLS | frozenset(
    {
        *LIBRARY_GROUP_STARTS,
        "detectron2.engine.launch",
        "detectron2.engine.launch.launch",
        "classy_vision.generic.distributed_util.set_cuda_device_index",
        "torch.distributed.device_mesh.init_device_mesh",
    }
)

# `torch_device = getattr(torch, device_type); torch_device.set_device(device)` (a device module)
BINDING_METHODS = frozenset({"set_device", "set_device_index"})

LOADER = "torch.utils.data.DataLoader"
# Libraries' DataLoader subclasses that take a dataset, batch size, shuffle and sampler as torch's does.
LOADER_SUBCLASSES = {
    "torch_geometric.loader.DataLoader",
    "torch_geometric.loader.dataloader.DataLoader",
    "torch_geometric.data.DataLoader",
}
# The base classes of a dataset (under their public names, as data_name gives them).
DATASETS = {"torch.utils.data.Dataset", "torch.utils.data.IterableDataset"}

# Learning-rate schedulers (torch's, and the factories of Hugging Face transformers): their
# state_dict holds step counts and rates, no tensors on a device.
LR_SCHEDULERS = re.compile(r"torch\.optim\.lr_scheduler\.\w+|transformers(\.optimization)?\.get_\w*schedule\w*")
PLAIN_SAMPLERS = {
    "torch.utils.data.RandomSampler",
    "torch.utils.data.SequentialSampler",
    "torch.utils.data.SubsetRandomSampler",
    "torch.utils.data.WeightedRandomSampler",
}

BATCH_SAMPLER = "torch.utils.data.BatchSampler"

NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode"})

CHECKPOINT_WRITERS = {"torch.save", "safetensors.torch.save_file", "safetensors.torch.save_model"}

LOG_WRITERS = {
    "torch.utils.tensorboard.SummaryWriter",
    "torch.utils.tensorboard.writer.SummaryWriter",
    "tensorboardX.SummaryWriter",
    "mlflow.start_run",
    "logging.FileHandler",
    "logging.handlers.RotatingFileHandler",
    "logging.handlers.TimedRotatingFileHandler",
}

# Library calls that write an output file, by the position of the path they write.
OUTPUT_WRITERS = {
    "numpy.save": 0,
    "numpy.savez": 0,
    "numpy.savez_compressed": 0,
    "numpy.savetxt": 0,
    "shutil.copy": 1,
    "shutil.copyfile": 1,
    "shutil.copy2": 1,
}

# Methods that write the object to the path they are given (pandas, matplotlib).
OUTPUT_METHODS = frozenset({"to_csv", "to_parquet", "to_pickle", "to_json", "to_excel", "savefig"})

# Expressions that name the current device without an index.
CURRENT_DEVICE_CALLS = frozenset({"torch.accelerator.current_accelerator"})

BARRIER = "torch.distributed.barrier"
