"""What the user asked the runtime audit to do, as parsed by the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RuntimeOptions:
    script: Path | None  # None: the machine-only preflight (no training script)
    script_args: tuple[str, ...] = ()
    nproc_per_node: int | None = None  # None: number of visible GPUs, or 2 without GPUs
    backend: str = "auto"  # auto | gloo | nccl
    steps: int = 8  # batches per epoch per DataLoader
    epochs: int = 2  # truncated epochs of the training loader
    timeout: float = 300.0  # whole audit, seconds
    rdzv_timeout: float = 60.0  # rendezvous and process-group init, seconds
    output_format: str = "text"  # text | json
    output: Path | None = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: pick a free port
    rdzv_backend: str | None = None
    rdzv_endpoint: str | None = None
    sandbox: bool = True  # run the job in namespaces under a copy-on-write layer (--no-sandbox)
    verbose: bool = False  # stream the ranks' output with a rank prefix (-v)
    quiet: bool = False  # text report: only what is not PASS (-q)
    device: str = "auto"  # auto | cpu | cuda: cpu maps the script's CUDA to the CPU (auto: when no GPU)
    mapped_gpus: int | None = None  # GPUs each process sees with CUDA mapped to the CPU; None: the node's processes
    allow_no_data: bool = False  # a run that reached no batch is not a failure (--allow-no-data)
    scaling: bool = False  # also run the steps with 1 process: perf.scaling (--scaling)
    resume_args: tuple[str, ...] | None = None  # restart the script with these arguments: ckpt.restart
    extra: dict[str, str] = field(default_factory=dict)
