"""What a rank's probe records about memory, step times and checkpoints, as the checks read it.

Like the loader records, the probe stores these with `dataclasses.asdict` under the record's
"perf" key (plain data: a multi-node audit ships records between nodes); `RankRecord.from_plain`
rebuilds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DevicePeak:
    """The caching allocator's high-water marks on one CUDA device of the rank."""

    index: int
    allocated_bytes: int  # torch.cuda.max_memory_allocated: live tensors
    reserved_bytes: int  # torch.cuda.max_memory_reserved: what the allocator holds (what OOMs)


@dataclass
class MemPeak:
    rss_peak_bytes: int | None  # the process's peak resident set (VmHWM) when the steps ended
    rss_at_first_batch_bytes: int | None  # the same peak when the training loader's first batch came
    host_total_bytes: int | None  # MemTotal of the node
    devices: list[DevicePeak] = field(default_factory=list)


@dataclass
class StepSample:
    """One training step, from one `__next__` of the training loader to the next."""

    epoch: int
    step: int  # 1-based within the epoch
    wait_s: float  # blocked in the loader's __next__: waiting for data
    rest_s: float  # the rest of the step: forward, backward, communication, optimizer, the script's own
    loss: float | None = None  # the scalar the step's first backward() started from (--resume-args)
    weights: list[float] | None = None  # per parameter of each DDP model, its sum, as the step began (--resume-args)
    at: float | None = None  # time.monotonic() as the step began (every process of a node shares it)
    compute_s: float | None = None  # first module call -> last backward's end (gradient sync inside); None: no backward
    optimizer_s: float = 0.0  # in Optimizer.step (a closure's forward and backward left out)

    @property
    def ended_at(self) -> float | None:
        return None if self.at is None else self.at + self.wait_s + self.rest_s


@dataclass
class CommSample:
    """DDP's own runtime stats of one iteration (reducer timers, every iteration)."""

    iteration: int
    comm_s: float  # first bucket's all_reduce launched -> the last one done
    overlap_s: float  # of which overlapped with backward compute

    @property
    def exposed_s(self) -> float:
        """Time the rank sat waiting for gradient communication after its backward was done."""
        return max(0.0, self.comm_s - self.overlap_s)


@dataclass
class StepTimes:
    steps: list[StepSample] = field(default_factory=list)
    comm: list[CommSample] = field(default_factory=list)
    ddp_models: int = 0  # DDP models whose reducer timers were read
    probe_s: float = 0.0  # the probe's own per-batch work (fingerprints, phase file), left out of the steps


@dataclass
class OptimizerInfo:
    kind: str  # class name
    stateful: bool  # holds per-parameter state after the audited steps (momentum, Adam moments)


@dataclass
class LiveTraining:
    """The training objects alive when the script ended, to know what a resume needs."""

    optimizers: list[OptimizerInfo] = field(default_factory=list)
    schedulers: list[str] = field(default_factory=list)
    scaler: bool = False  # an enabled GradScaler


@dataclass
class CheckpointContent:
    """What one file written with torch.save holds, read back with torch.load in the rank."""

    path: str
    size_bytes: int | None
    load_s: float | None = None  # time torch.load took (tensors memory-mapped)
    error: str | None = None  # torch.load failed: why
    model: str | None = None  # where the weights are: "checkpoint['model']", "checkpoint" (top level)
    model_tensors: int = 0
    module_prefix: bool = False  # every key starts with DDP's "module."
    whole_module: bool = False  # an nn.Module pickled whole (torch.save(model))
    optimizer: str | None = None
    optimizer_state_entries: int | None = None  # len(state): 0 means nothing saved per parameter
    optimizer_groups: list[str] = field(default_factory=list)  # what param_groups say: "momentum=0.9", "betas"
    scheduler: str | None = None
    scaler: str | None = None
    counters: dict[str, int] = field(default_factory=dict)  # "checkpoint['epoch']" -> 1
    rng: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # top-level keys of a dict checkpoint
    collective: bool = False  # a torch.distributed.checkpoint directory, judged from its metadata
    parts: list[str] = field(default_factory=list)  # a directory checkpoint: its files, judged together


@dataclass
class PerfRecord:
    mem: MemPeak | None = None
    times: StepTimes = field(default_factory=StepTimes)
    checkpoints: list[CheckpointContent] = field(default_factory=list)
    live: LiveTraining = field(default_factory=LiveTraining)
    loaded: list[str] = field(default_factory=list)  # absolute paths the script gave torch.load, in order

    @property
    def steps_ran(self) -> int:
        return len(self.times.steps)
