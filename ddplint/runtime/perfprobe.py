"""Step times, peak memory and checkpoint contents, measured inside a rank.

- Step times: the data probe tells `StepClock` when the training loader's `__next__` is called,
  when the batch came back and when the probe's own per-batch work was done. A step runs from
  one `__next__` call to the next: the time inside `__next__` is waiting for data, the rest is
  the script's own step. The probe's own work (sample fingerprints, the phase file) is left out.
- Gradient communication: DDP's reducer already times every iteration (backward compute, and
  from the first bucket's all_reduce to the last one's completion) for its own logging, only
  for the first 10 iterations by default; every DDP model built during the audit is set to
  sample every iteration, and its last iteration's numbers are read at each step boundary.
  The exposed part (communication not overlapped with backward) is how long a rank waited for
  its peers: in synchronous training every rank's step is as long as the slowest one's, so a
  straggler shows only there.
- Forward+backward and optimizer: a step's compute runs from its first module call (a global
  forward pre-hook armed at each batch, removed at its first call, so one module call per step
  pays for it) to the end of its last `torch.autograd.backward`; `Optimizer.step` is timed by
  torch's global optimizer hooks. An optimizer step that holds a backward (a closure, as
  Lightning's) counts as compute for that part; one between two backwards (a GAN's) is cut out
  of the compute. What is left of the step is "the rest": moving the batch, logging, metrics.
- Peak memory: VmHWM of the process (the kernel's resident high-water mark) at the first
  training batch and when the script ended; on GPU the caching allocator's peaks per device.
- Checkpoints: each file the rank wrote with torch.save (or a checkpoint-named file it wrote or
  renamed into place) is read back with torch.load once the script has ended, in the rank
  itself: the files are the script's own, inside the sandbox, and unpickling them trusts no
  code beyond the script the rank already ran. Tensors are memory-mapped, not read.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import time
import types
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ddplint.runtime.perfrecords import (
    CheckpointContent,
    CommSample,
    DevicePeak,
    LiveTraining,
    MemPeak,
    OptimizerInfo,
    StepSample,
    StepTimes,
)

CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".tar", ".safetensors")
MAX_CHECKPOINTS = 8  # read back per rank, the last ones written
STATE_JSON_LIMIT = 1 << 20  # a JSON file beside a checkpoint is read for counters up to 1 MiB
DCP_VALUE_LIMIT = 1 << 16  # a DCP checkpoint's non-tensor values are read back up to 64 KiB each
LEGACY_LIMIT = 1 << 30  # a non-zip (legacy) checkpoint cannot be memory-mapped: read only up to 1 GiB
_DEPTH = 3  # dict levels followed inside a checkpoint
COUNTER_NAMES = {
    "epoch",
    "epochs",
    "step",
    "steps",
    "iteration",
    "iterations",
    "iter",
    "it",
    "global_step",
    "num_updates",
    "updates",
    "batch_idx",
    "total_steps",
    "num_steps",
    "start_epoch",
}
COUNTER_SUFFIXES = ("_epoch", "_epochs", "_step", "_steps", "_iter", "_iteration", "_iterations")
COUNTER_PREFIXES = ("epoch_", "epochs_")  # epochs_run, epoch_idx (not step_: a StepLR's step_size)


# -- step times -----------------------------------------------------------------------------


@dataclass
class StepMarks:
    """When the pending step's compute happened (time.perf_counter())."""

    first_call: float | None = None  # the step's first module call
    backward: list[tuple[float, float]] = field(default_factory=list)  # outermost backward() calls
    optimizer: list[tuple[float, float]] = field(default_factory=list)  # outermost Optimizer.step calls

    def split(self) -> tuple[float | None, float]:
        """(forward+backward, optimizer) seconds; no compute span without a backward."""
        optimizer = sum(e - s for s, e in self.optimizer)
        if not self.backward:
            return None, optimizer
        start, end = self.backward[0][0], self.backward[-1][1]
        if self.first_call is not None:
            start = min(start, self.first_call)
        compute = end - start
        for s, e in self.optimizer:
            inside = max(0.0, min(e, end) - max(s, start))
            if any(s <= bs and be <= e for bs, be in self.backward):
                optimizer -= inside  # a closure: its forward and backward are compute
            else:
                compute -= inside
        return max(0.0, compute), max(0.0, optimizer)


class StepClock:
    def __init__(self, weights: bool = False) -> None:
        self.weights = weights  # a restart comparison: note each step's starting weights and loss
        self.times = StepTimes()
        self._pending: tuple[int, int, float, float, float] | None = None  # epoch, step, called, wait, batch done
        self._monotonic = time.monotonic() - time.perf_counter()  # the audit's GPU sampler keeps monotonic time
        self._loss: float | None = None  # of the pending step
        self._weights: list[float] | None = None  # as the pending step began
        self._models: weakref.WeakSet = weakref.WeakSet()
        self._seen: set[tuple[int, int]] = set()
        self.rss_at_first_batch: int | None = None
        self._marks = StepMarks()
        self._backward_depth = 0
        self._optimizer_depth = 0
        self._optimizer_began = 0.0
        self._arm_forward: Callable[[], None] | None = None  # set by install()

    def install(self) -> None:
        """Every DDP model built from now on samples its runtime stats every iteration; backward()
        and Optimizer.step are timed, and each step's first module call noted. For a restart
        comparison, each step's first backward() also notes the loss it starts from (reading it
        waits for the GPU: not done otherwise)."""
        import torch
        import torch.autograd
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.nn.parallel import DistributedDataParallel
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        orig = DistributedDataParallel.__init__
        orig_backward = torch.autograd.backward
        clock = self

        @functools.wraps(orig_backward)
        def backward(tensors, *args, **kwargs):
            if clock.weights and isinstance(tensors, torch.Tensor):
                clock.loss(tensors)
            clock._backward_depth += 1
            began = time.perf_counter()
            try:
                return orig_backward(tensors, *args, **kwargs)
            finally:
                clock._backward_depth -= 1
                if clock._backward_depth == 0:
                    clock._marks.backward.append((began, time.perf_counter()))

        torch.autograd.backward = backward  # patched on purpose: Tensor.backward calls it

        @functools.wraps(orig)
        def __init__(model, *args, **kwargs):
            orig(model, *args, **kwargs)
            with contextlib.suppress(Exception):  # a torch without the logger: steps are still timed
                model._set_ddp_runtime_logging_sample_rate(1)
                clock._models.add(model)

        DistributedDataParallel.__init__ = __init__  # type: ignore[method-assign,assignment]  # patched on purpose

        def optimizer_began(*_) -> None:
            if clock._optimizer_depth == 0:
                clock._optimizer_began = time.perf_counter()
            clock._optimizer_depth += 1

        def optimizer_ended(*_) -> None:
            clock._optimizer_depth = max(0, clock._optimizer_depth - 1)
            if clock._optimizer_depth == 0:
                clock._marks.optimizer.append((clock._optimizer_began, time.perf_counter()))

        register_optimizer_step_pre_hook(optimizer_began)
        register_optimizer_step_post_hook(optimizer_ended)

        armed: list = []

        def first_call(*_) -> None:
            if clock._marks.first_call is None:
                clock._marks.first_call = time.perf_counter()
            while armed:
                armed.pop().remove()

        def arm() -> None:
            if not armed:
                armed.append(register_module_forward_pre_hook(first_call))

        self._arm_forward = arm

    def first_batch(self) -> None:
        self.rss_at_first_batch = rss_peak()

    def batch(self, epoch: int, step: int, called: float, got: float, done: float) -> None:
        """A batch of the training loader: `__next__` called, the batch back, the probe done."""
        self._close(epoch, called)
        self._weights = None
        if self.weights:
            self._weights = self._fingerprint()
            done = max(done, time.perf_counter())  # the fingerprint is the probe's work, not the step's
        self._pending = (epoch, step, called, got - called, done)
        self._loss = None
        self._marks = StepMarks()
        self._optimizer_depth = 0  # an optimizer step that raised never ended
        if self._arm_forward is not None:
            self._arm_forward()
        self.times.probe_s += done - got

    def _fingerprint(self) -> list[float] | None:
        """Each parameter's sum, over the DDP models: equal weights give equal sums, and a
        checkpoint's weights not loaded show at once. One read of the weights per step."""
        import torch

        sums: list[float] = []
        with contextlib.suppress(Exception), torch.no_grad():
            for model in list(self._models):
                sums += [float(p.sum(dtype=torch.float64)) for p in model.parameters()]
        return sums or None

    def loss(self, tensor) -> None:
        """backward() on `tensor`: the step's loss, when it is the step's first scalar one."""
        if self._pending is None or self._loss is not None:
            return
        with contextlib.suppress(Exception):  # a tensor subclass that will not convert: no loss
            if tensor.numel() == 1:
                self._loss = float(tensor.detach())

    def epoch_end(self, epoch: int, called: float) -> None:
        self._close(epoch, called)
        self._pending = None

    def _close(self, epoch: int, called: float) -> None:
        if self._pending is not None and self._pending[0] == epoch:
            e, step, began, wait, done = self._pending
            at = round(began + self._monotonic, 4)
            compute, optimizer = self._marks.split()
            self.times.steps.append(
                StepSample(
                    e,
                    step,
                    round(wait, 6),
                    round(called - done, 6),
                    self._loss,
                    self._weights,
                    at,
                    None if compute is None else round(compute, 6),
                    round(optimizer, 6),
                )
            )
            self._read_comm()
        self._pending = None

    def _read_comm(self) -> None:
        for model in list(self._models):
            d = {}
            with contextlib.suppress(Exception):
                d = model._get_ddp_logging_data()
            it, comm = d.get("iteration"), d.get("backward_comm_time")
            if not isinstance(it, int) or not isinstance(comm, int) or (id(model), it) in self._seen:
                continue
            self._seen.add((id(model), it))
            overlap = d.get("backward_compute_comm_overlap_time", 0)
            self.times.comm.append(CommSample(it, comm / 1e9, (overlap if isinstance(overlap, int) else 0) / 1e9))
        self.times.ddp_models = len(self._models)


# -- memory ---------------------------------------------------------------------------------


def _status_kib(field: str, path: str = "/proc/self/status") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_peak() -> int | None:
    """The process's resident high-water mark; ru_maxrss where /proc is not there."""
    peak = _status_kib("VmHWM")
    if peak is None:
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        except (ImportError, OSError):
            return None
    return peak


def mem_peak(clock: StepClock) -> MemPeak:
    import torch

    devices = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            reserved = torch.cuda.max_memory_reserved(i)
            if reserved:
                devices.append(DevicePeak(i, torch.cuda.max_memory_allocated(i), reserved))
    return MemPeak(rss_peak(), clock.rss_at_first_batch, _status_kib("MemTotal", "/proc/meminfo"), devices)


# -- checkpoints ----------------------------------------------------------------------------


class TrainingObjects:
    """Optimizers, LR schedulers and grad scalers the script builds (weakly held), so that a
    checkpoint can be judged against what a resume would have to restore. Snapshotted at each
    torch.save, while they are alive: the script's globals are gone once it has ended."""

    def __init__(self, note_loads: bool = False) -> None:
        self.note_loads = note_loads  # a restart: which files it gives torch.load
        self._objects: weakref.WeakSet = weakref.WeakSet()
        self.live = LiveTraining()
        self.main_module: types.ModuleType | None = None  # the script's __main__ at its last torch.save, to unpickle its classes
        self.loaded: list[str] = []  # paths the script gave torch.load

    def install(self) -> None:
        import torch

        if self.note_loads:
            orig_load = torch.load
            loaded = self.loaded

            @functools.wraps(orig_load)
            def load(f, *args, **kwargs):
                if isinstance(f, (str, bytes, os.PathLike)):
                    loaded.append(os.path.abspath(os.fsdecode(f)))
                return orig_load(f, *args, **kwargs)

            torch.load = load

        classes = [torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]
        scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler is not None:
            classes.append(scaler)
        for cls in classes:
            self._wrap(cls)

    def _wrap(self, cls) -> None:
        orig = cls.__init__
        objects = self._objects

        @functools.wraps(orig)
        def __init__(obj, *args, **kwargs):
            orig(obj, *args, **kwargs)
            try:
                objects.add(obj)
            except TypeError:
                pass

        cls.__init__ = __init__

    def saved(self) -> None:
        """A torch.save: remember what the training holds now."""
        import torch

        self.main_module = sys.modules.get("__main__")
        live = LiveTraining()
        for obj in list(self._objects):
            if isinstance(obj, torch.optim.Optimizer):
                live.optimizers.append(OptimizerInfo(type(obj).__name__, _stateful(obj)))
            elif isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
                live.schedulers.append(type(obj).__name__)
            elif getattr(obj, "is_enabled", lambda: False)():
                live.scaler = True
        self.live = live


def _stateful(optimizer) -> bool:
    import torch

    return any(isinstance(t, torch.Tensor) and t.dim() > 0 for s in optimizer.state.values() for t in s.values())


def checkpoint_candidates(writes: list[dict]) -> list[str]:
    """Paths this rank wrote that may be checkpoints, the last MAX_CHECKPOINTS, latest write last."""
    order: dict[str, None] = {}
    for w in writes:
        if w.get("dir") or w.get("library"):
            continue
        path = w["path"]
        if w["op"] in ("torch.save", "dcp.save") or path.endswith(CHECKPOINT_SUFFIXES):
            order.pop(path, None)
            order[path] = None
    return list(order)[-MAX_CHECKPOINTS:]


def read_checkpoints(
    writes: list[dict], readable, objects: TrainingObjects, coordinator: bool = True, since: float = 0.0
) -> list[CheckpointContent]:
    """Load back every checkpoint this rank wrote that still exists; `readable(path)` is where the
    rank reads it (the scratch copy when writes are redirected). A collective checkpoint
    (torch.distributed.checkpoint) is read by the `coordinator` rank only: it is one checkpoint.
    Beside them, the other pieces of a directory checkpoint written since `since` (see _beside)."""
    ops: dict[str, set[str]] = {}
    for w in writes:
        ops.setdefault(w["path"], set()).add(w["op"])
    out = []
    for path in checkpoint_candidates(writes):
        real = readable(path)
        if "dcp.save" in ops[path]:
            if coordinator and os.path.isfile(os.path.join(real, ".metadata")):
                out.append(load_dcp(real, path))
            continue
        if not os.path.isfile(real):
            continue  # renamed into place, or removed again
        content = (
            load_safetensors(real, path) if path.endswith(".safetensors") else load_checkpoint(real, path, objects.main_module)
        )
        if "torch.save" not in ops[path] and (content.error is not None or (content.model is None and content.optimizer is None)):
            continue  # named like a checkpoint, but not one: unreadable, or a pickle of something else
        out.append(content)
    return out + _beside(out, readable, since)


def _beside(found: list[CheckpointContent], readable, since: float) -> list[CheckpointContent]:
    """The pieces of directory checkpoints (a model saved with save_pretrained beside
    optimizer.pt and a JSON file with the step) that the rank did not see written or would not
    read alone: safetensors weights (written by native code) and JSON files holding a counter,
    in the directories of the checkpoints read, written since `since`. The check judges the
    pieces of one directory together."""
    import json

    seen = {c.path for c in found}
    out = []
    for directory in dict.fromkeys(os.path.dirname(c.path) for c in found if not c.collective):
        real_dir = readable(directory)
        try:
            entries = sorted(os.scandir(real_dir), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(directory, entry.name)
            try:
                st = entry.stat()
            except OSError:
                continue
            if path in seen or not entry.is_file() or st.st_mtime < since:
                continue
            if entry.name.endswith(".safetensors"):
                out.append(load_safetensors(entry.path, path))
            elif entry.name.endswith(".json") and st.st_size <= STATE_JSON_LIMIT:
                content = CheckpointContent(path=path, size_bytes=st.st_size)
                with contextlib.suppress(OSError, ValueError), open(entry.path, encoding="utf-8") as f:
                    describe(json.load(f), content)
                if content.counters:
                    out.append(content)
    return out[-MAX_CHECKPOINTS:]


def load_safetensors(real: str, path: str) -> CheckpointContent:
    """Model weights in the safetensors format, from its header alone (an 8-byte little-endian
    length, then JSON naming each tensor): no tensor is read."""
    import json

    size = os.path.getsize(real)
    content = CheckpointContent(path=path, size_bytes=size)
    try:
        with open(real, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if not 2 <= length <= min(size - 8, 100 << 20):
                raise ValueError("no safetensors header")
            header = json.loads(f.read(length))
        names = [k for k in header if k != "__metadata__"]
    except (OSError, ValueError, AttributeError) as exc:
        content.error = f"{type(exc).__name__}: {exc}"[:200]
        return content
    if names:
        content.model, content.model_tensors, content.module_prefix = "checkpoint", len(names), _prefixed(names)
    content.keys = names[:40]
    return content


def load_checkpoint(real: str, path: str, main_module=None) -> CheckpointContent:
    import torch

    size = os.path.getsize(real)
    content = CheckpointContent(path=path, size_bytes=size)
    saved_main = sys.modules.get("__main__")
    if main_module is not None:
        sys.modules["__main__"] = main_module  # classes the script defined pickle as __main__.X
    start = time.perf_counter()
    try:
        try:
            obj = torch.load(real, map_location="cpu", weights_only=False, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zip" not in str(exc):
                raise
            if size > LEGACY_LIMIT:
                content.error = "a legacy (non-zip) checkpoint over 1 GiB: not read back"
                return content
            obj = torch.load(real, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - whatever torch.load raises is the finding
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        content.error = f"{type(exc).__name__}: {text}"[:200]
        return content
    finally:
        if saved_main is not None:
            sys.modules["__main__"] = saved_main
        else:
            sys.modules.pop("__main__", None)
        content.load_s = round(time.perf_counter() - start, 4)
    describe(obj, content)
    return content


def load_dcp(real: str, path: str) -> CheckpointContent:
    """A torch.distributed.checkpoint directory, judged from its metadata alone: each tensor's
    name and shape (as a tensor on the meta device: no data is read), and the small non-tensor
    values (counters, param_groups) read from where the metadata says they are."""
    import torch
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata

    content = CheckpointContent(path=path, size_bytes=None, collective=True)
    start = time.perf_counter()
    tree: dict = {}
    try:
        files = [os.path.join(real, name) for name in os.listdir(real)]
        content.size_bytes = sum(os.path.getsize(f) for f in files if os.path.isfile(f))
        meta = FileSystemReader(real).read_metadata()
        planned = meta.planner_data if isinstance(meta.planner_data, Mapping) else {}
        for fqn, item in meta.state_dict_metadata.items():
            where = planned.get(fqn)
            leaf: object
            if isinstance(item, TensorStorageMetadata):
                leaf = torch.empty(item.size, dtype=item.properties.dtype, device="meta")
            else:
                leaf = _dcp_value(real, meta.storage_data.get(MetadataIndex(fqn)))
            _place(tree, tuple(where) if isinstance(where, (tuple, list)) else (fqn,), leaf)
    except Exception as exc:  # noqa: BLE001 - a checkpoint DCP cannot read back is the finding
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        content.error = f"{type(exc).__name__}: {text}"[:200]
        return content
    finally:
        content.load_s = round(time.perf_counter() - start, 4)
    describe(_as_lists(tree), content)
    return content


def _dcp_value(real: str, stored) -> object:
    """A non-tensor value of a DCP checkpoint (torch.save'd bytes), or None past DCP_VALUE_LIMIT."""
    import io

    import torch

    if stored is None or getattr(stored, "transform_descriptors", None) or stored.length > DCP_VALUE_LIMIT:
        return None
    with contextlib.suppress(Exception), open(os.path.join(real, stored.relative_path), "rb") as f:
        f.seek(stored.offset)
        return torch.load(io.BytesIO(f.read(stored.length)), weights_only=False)
    return None


def _place(tree: dict, where: tuple, leaf) -> None:
    for key in where[:-1]:
        tree = tree.setdefault(key, {})
    tree[where[-1]] = leaf


def _as_lists(node):
    """DCP flattens lists to their indices: {0: a, 1: b} back to [a, b]."""
    if not isinstance(node, dict):
        return node
    items = {k: _as_lists(v) for k, v in node.items()}
    if items and all(isinstance(k, int) for k in items) and sorted(items) == list(range(len(items))):
        return [items[i] for i in range(len(items))]
    return items


def describe(obj, content: CheckpointContent) -> None:
    """Fill `content` with what `obj` (a loaded checkpoint) holds."""
    if isinstance(obj, Mapping):
        content.keys = [str(k) for k in list(obj)[:40]]
    _walk(obj, "checkpoint", 0, content)
    content.counters = dict(sorted(content.counters.items(), key=lambda kv: _counter_rank(kv[0])))


def _counter_rank(where: str) -> tuple[bool, int]:
    """The report names the first counter: a known name (global_step) before a suffix match
    (eval_steps: often a setting), the shallowest first (not a log entry's step)."""
    last = re.search(r"\[['\"]?([^'\"\]]*)['\"]?\]$", where)
    return (last is None or last.group(1).lower() not in COUNTER_NAMES, where.count("["))


def _walk(obj, where: str, depth: int, c: CheckpointContent) -> None:
    import torch

    if isinstance(obj, torch.nn.Module):
        if c.model is None:
            c.model, c.whole_module = where, True
            sd = obj.state_dict()
            c.model_tensors, c.module_prefix = len(sd), _prefixed(sd)
        return
    if isinstance(obj, torch.optim.Optimizer):
        if c.optimizer is None:
            c.optimizer, c.optimizer_state_entries = where, len(obj.state)
            c.optimizer_groups = _group_hints(obj.param_groups)
        return
    if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
        c.scheduler = c.scheduler or where
        return
    if isinstance(obj, Mapping):
        if "state" in obj and "param_groups" in obj:
            if c.optimizer is None:
                state = obj["state"]
                c.optimizer = where
                c.optimizer_state_entries = len(state) if isinstance(state, Mapping) else None
                c.optimizer_groups = _group_hints(obj["param_groups"])
            return
        if "last_epoch" in obj and ("base_lrs" in obj or "_last_lr" in obj):
            c.scheduler = c.scheduler or where
            return
        if "scale" in obj and "growth_factor" in obj:
            c.scaler = c.scaler or where
            return
        if _is_state_dict(obj):
            if c.model is None:
                c.model, c.model_tensors, c.module_prefix = where, len(obj), _prefixed(obj)
            return
        for key, value in obj.items():
            name = f"{where}[{key!r}]"
            low = str(key).lower()
            counter = _counter_value(value)
            if counter is not None and (
                low in COUNTER_NAMES or low.endswith(COUNTER_SUFFIXES) or low.startswith(COUNTER_PREFIXES)
            ):
                c.counters[name] = counter
            elif "rng" in low or "random" in low or "generator" in low or "seed_state" in low or _is_rng_state(value):
                c.rng.append(name)
            elif depth < _DEPTH:
                _walk(value, name, depth + 1, c)
        return
    if isinstance(obj, (list, tuple)) and depth < _DEPTH:
        for i, value in enumerate(obj[:16]):
            _walk(value, f"{where}[{i}]", depth + 1, c)


def _is_rng_state(value) -> bool:
    """A random generator's state by its shape: torch's CPU generator (5056 bytes), Python's
    random.getstate() (version 3, 625 words), numpy's legacy get_state() ("MT19937", ...)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.dtype is torch.uint8 and value.dim() == 1 and value.numel() == 5056
    if isinstance(value, tuple) and len(value) >= 2:
        return (value[0] == 3 and isinstance(value[1], tuple) and len(value[1]) == 625) or value[0] == "MT19937"
    return False


def _is_state_dict(d: Mapping) -> bool:
    import torch

    if not d or not all(isinstance(k, str) for k in d):
        return False
    tensors = sum(isinstance(v, torch.Tensor) for v in d.values())
    return tensors > 0 and tensors >= 0.8 * len(d)


def _prefixed(sd) -> bool:
    return bool(sd) and all(str(k).startswith("module.") for k in sd)


def _counter_value(value) -> int | None:
    import torch

    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 0
        and not value.is_floating_point()
        and value.dtype is not torch.bool
        and not value.is_meta  # a DCP checkpoint's tensor: its shape only
    ):
        return int(value)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.integer):
        return int(value)
    return None


def _group_hints(groups) -> list[str]:
    """What the param_groups say about per-parameter state the optimizer keeps."""
    hints: list[str] = []
    for g in groups if isinstance(groups, (list, tuple)) else []:
        if not isinstance(g, Mapping):
            continue
        momentum = g.get("momentum")
        if isinstance(momentum, (int, float)) and momentum > 0 and f"momentum={momentum:g}" not in hints:
            hints.append(f"momentum={momentum:g}")
        if "betas" in g and "betas" not in hints:
            hints.append("betas")
    return hints
