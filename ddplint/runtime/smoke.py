"""The job of the machine preflight (`ddplint --runtime` with no script): a process group on
the requested processes and nodes, bound one GPU per local rank when there are GPUs, and a
barrier. The probe's own checks run inside it: the all_reduce smoke test and the bandwidth
sweep right after init, and everything the host checks read before the launch."""

import os

import torch
import torch.distributed as dist


def main() -> None:
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
