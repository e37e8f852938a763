"""One rank's record of an audited run, as every check reads it.

The probe writes its record as plain data (dicts, lists, numpy arrays: what a multi-node audit
lets through its record exchange); the launcher turns each into a `RankRecord` with
`RankRecord.from_plain` once the nodes' records are merged, and no check reads a plain record.
A hook that raised leaves only the `error` of its part.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ddplint.runtime.datarecords import LoaderRecord
from ddplint.runtime.perfrecords import PerfRecord
from ddplint.runtime.plain import from_plain

RankStatus = Literal["stopped", "completed", "raised", "terminated"]


@dataclass
class ErrorSite:
    """The user's frame an exception came from (the last one outside ddplint, the stdlib and torch)."""

    file: str
    line: int | None
    function: str
    code: str | None = None


@dataclass
class RankError:
    """What the script raised on this rank (SystemExit with a non-zero code included)."""

    type: str
    message: str  # the first line, at most 200 characters
    text: str  # the whole traceback
    t: float  # time.time() when it was caught: the first rank to fail is the root cause
    site: ErrorSite | None = None
    stderr_tail: list[str] = field(default_factory=list)  # a SystemExit's last stderr lines (argparse)


@dataclass
class Backend:
    requested: str | None = None  # what the script passed to init_process_group
    forced: str | None = None  # what the audit passed instead (gloo on a CPU), or None
    used: str | None = None  # dist.get_backend() once init returned


@dataclass
class Versions:
    """What must be identical on every rank and node (checks/stack.py's collect_versions)."""

    python: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    nccl: str | None = None
    nccl_available: bool | None = None
    cuda_available: bool = False
    device_count: int = 0
    arch_list: list[str] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)  # "name==version"
    packages_hash: str | None = None
    script: str | None = None
    script_sha256: str | None = None
    git_commit: str | None = None


@dataclass
class NvmlView:
    """Driver, visible GPUs and what their links allow, as NVML sees them from local rank 0."""

    driver_version: str | None = None
    cuda_driver_version: int | None = None
    visible: int = 0
    uuids: list[str] = field(default_factory=list)
    gpus: list[dict] = field(default_factory=list)  # {"name", "capability": [major, minor]}
    expected_busbw_gbps: float | None = None
    basis: str | None = None  # how the expected bandwidth was reached
    error: str | None = None  # NVML could not be read: why


@dataclass
class RankInfo:
    """Who the rank is and what it runs on, collected before the script starts."""

    hostname: str | None = None
    pid: int | None = None
    env: dict[str, str] = field(default_factory=dict)  # torchrun's identity variables
    versions: Versions | None = None
    nvml: NvmlView | None = None  # local rank 0 only: one NVML read per node
    nics_gbps: list[float] | None = None  # active InfiniBand/RoCE port rates, fastest first
    error: str | None = None  # the hook raised


@dataclass
class AllReduce:
    """ddplint's all_reduce smoke test of rank+1 right after init_process_group."""

    ok: bool = False
    seconds: float = 0.0
    value: float | None = None
    expected: float | None = None
    phase: str | None = None  # where it failed
    error: str | None = None


@dataclass
class CommFacts:
    """The smoke test and the bandwidth sweep, run in the rank right after init_process_group."""

    backend: str | None = None
    rank: int | None = None  # the rank the process group gave it
    world_size: int | None = None
    device: str | None = None
    allreduce: AllReduce | None = None
    sweep: list[dict] | None = None  # {"bytes", "seconds", "algbw_gbps", "busbw_gbps"} per size
    sweep_error: dict | None = None  # {"phase", "error"}
    stalled: bool = False  # a collective did not finish within the audit's limit
    error: str | None = None  # the hook raised

    @property
    def ran(self) -> bool:
        return self.backend is not None or self.error is not None


@dataclass
class GpuIdentity:
    index: int
    name: str
    total_memory: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None


@dataclass
class BindingFacts:
    """Where the rank's model lives, read when the training loader yields its first batch."""

    device_type: str | None = None  # "cuda" or "cpu"; None: the first batch never came
    cuda_initialized: bool = False
    cuda_available: bool = False
    current_device: int | None = None
    gpu: GpuIdentity | None = None
    basis: str | None = None  # what placed it: "DDP model", "model parameters", "CUDA tensors", "asked"
    devices: list[int] = field(default_factory=list)
    model_device: int | None = None
    mapped_to_cpu: bool = False  # CUDA mapped to the CPU: the GPU the rank asked for
    asked: dict | None = None  # cpucuda's record of what the rank asked for
    model: dict | None = None  # checks/memory.py's estimate of the model state
    error: str | None = None  # the hook raised

    @property
    def reached(self) -> bool:
        """The hook ran and read where the model lives."""
        return self.device_type is not None and self.error is None


@dataclass
class Write:
    """One path the script opened for writing (or created, removed, renamed)."""

    path: str
    op: str  # "open:w", "torch.save", "dcp.save", "makedirs", "os.replace", ...
    site: str | None = None  # file:line in the script
    library: bool = False  # a library's own write to the temp directory or ~/.cache
    dir: bool = False  # a directory made
    collective: bool = False  # every rank writes its shard of it (torch.distributed.checkpoint)
    at: list[int] | None = None  # [epoch, batches] of the training loader when it was written


@dataclass
class RankRecord:
    rank: int
    local_rank: int = 0
    world_size: int = 1
    node: str | None = None  # the host name, as the probe saw it
    pid: int | None = None
    status: RankStatus | None = None  # None: the record was written before the script ended
    error: RankError | None = None
    backend: Backend | None = None  # None: the script never called init_process_group
    init_called: bool = False
    destroy_deferred: bool = False
    cuda_on_cpu: bool = False
    own_workers: int = 0  # worker processes the script started itself (mp.spawn), unaudited
    info: RankInfo = field(default_factory=RankInfo)
    comm: CommFacts = field(default_factory=CommFacts)
    binding: BindingFacts = field(default_factory=BindingFacts)
    loaders: dict[str, LoaderRecord] = field(default_factory=dict)  # by DataLoader site
    training_site: str | None = None  # the loader the script trained from
    perf: PerfRecord = field(default_factory=PerfRecord)
    writes: list[Write] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # path -> its first version's copy
    elapsed_s: float | None = None

    @classmethod
    def from_plain(cls, plain: dict) -> RankRecord:
        return from_plain(cls, plain)

    @property
    def env(self) -> dict[str, str]:
        return self.info.env

    @property
    def host(self) -> str:
        return self.info.hostname or self.node or "?"

    @property
    def where(self) -> str:
        """The node a rank ran on: torchrun's GROUP_RANK, with the host name.

        Two ddplint processes acting as two nodes on one host share the host name, so the host
        name alone cannot tell the nodes apart.
        """
        group = self.env.get("GROUP_RANK")
        return f"node {group} ({self.host})" if group is not None else self.host

    @property
    def training_loader(self) -> LoaderRecord | None:
        return self.loaders.get(self.training_site) if self.training_site else None
