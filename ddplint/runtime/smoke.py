"""The job of the machine preflight (`ddplint --runtime` with no script): a process group on
the requested processes and nodes, bound one GPU per local rank when there are GPUs, and one
batch of a sharded loader moved to the rank's device. The probe's own checks run inside it:
the all_reduce smoke test and the bandwidth sweep right after init, the device binding at the
first batch, and everything the host checks read before the launch."""

import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    device = torch.device("cpu")
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    data = TensorDataset(torch.arange(2 * dist.get_world_size(), dtype=torch.float32))
    for (batch,) in DataLoader(data, batch_size=2, sampler=DistributedSampler(data, shuffle=True)):
        batch.to(device)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
