"""The entry point of every rank: `python -m ddplint.runtime.probe RUNDIR SCRIPT [ARGS...]`.

torchrun starts this module in each rank instead of the user's script. It patches only what
the audit needs (DataLoader iteration, file writes, init/destroy_process_group, and the
constructors of DDP, optimizers, LR schedulers and grad scalers for step timers and the
checkpoint read-back of perfprobe), runs the script with runpy as `__main__`, and writes one
record per rank into the run directory.

Hook points for the machine checks (module `ddplint.runtime.checks.rank`): the probe
calls `collect_rank_info()` before the script runs, `after_init_process_group()` right after
the script's own init_process_group returns, and `at_first_batch()` when the training loader
yields its first batch (after the script has bound its device); each returns a dict stored in
the record under "info", "comm" and "binding". A hook that raises is stored as {"error": ...}.

Ending: the script is unwound by AuditStop after --epochs epochs of the training loader, or
ends by itself. A rank whose script raised exits 1 at once, so torchrun stops the others (their
SIGTERM unwinds them too, and they still write their records). A
rank that finished waits on the process group's store until every rank has finished, then
leaves with os._exit: no rank tears the process group down while a peer still uses it, and
the script's own destroy_process_group() of the default group is deferred to that point (gloo
can abort when ranks destroy at different times; that would be the audit's noise, not the
user's bug).
"""

from __future__ import annotations

import collections
import contextlib
import faulthandler
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict
from typing import Any

from ddplint.runtime import ownworkers
from ddplint.runtime.rundir import LAUNCHER_PID_ENV, RANK, WORKER, RunDir


class Probe:
    kind = RANK  # whose files in the run directory: a process torchrun started

    def __init__(self, rundir: RunDir, script: str, args: list[str]):
        self.rundir = rundir
        self.script = os.path.abspath(script)
        self.args = args
        self.rank = int(os.environ.get("RANK", "0"))
        self.record: dict = {
            "rank": self.rank,
            "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "node": os.uname().nodename,
            "pid": os.getpid(),
            "status": None,  # stopped | completed | raised | terminated
            "error": None,
            "backend": None,
            "init_called": False,
            "destroy_deferred": False,
            "info": {},
            "comm": {},
            "binding": {},
        }
        self.config = rundir.read_config()
        self.started = time.time()
        self._phase: dict[str, Any] | None = None
        self._rank_hooks = _rank_hooks()
        from ddplint.runtime.sites import plumbing_dirs, torch_dirs

        # frames that are never "where the script did it": ddplint, the stdlib, torch
        self.skip_dirs = plumbing_dirs() + torch_dirs()

    # -- phases --

    def phase(self, name: str, **extra) -> None:
        """Publish what this rank is doing now (read by the launcher's progress and hang report)."""
        state = {"phase": name, **extra}
        if state == self._phase:
            return
        self._phase = state
        state = {**state, "since": time.time()}
        self.rundir.write_small(self._phase_path(), json.dumps(state))

    def _phase_path(self):
        return self.rundir.phase_path(self.rank)

    def _recording_init(self, original, forced: str | None, on_group=None):
        """`init_process_group` that forces the backend, publishes the phases around it, runs
        ddplint's own all_reduce smoke test and sweep once the group stands, and stops the
        script when that collective stalls (the script's own would hang the same way).
        `on_group` runs first once the group stands."""
        import torch.distributed as dist

        probe = self

        def init_process_group(*call_args, **kwargs):
            args = list(call_args)
            requested = args[0] if args else kwargs.get("backend")
            if forced is not None:
                ownworkers.force_backend(args, kwargs, forced)
            probe.record["init_called"] = True
            probe.record["backend"] = {"requested": requested, "forced": forced}
            probe.phase("init")
            result = original(*args, **kwargs)
            probe.record["backend"]["used"] = dist.get_backend()
            if on_group is not None:
                on_group()
            # the smoke test sets up the NCCL communicator unless the script passed device_id;
            # then the sweep (measure() publishes that phase)
            probe.phase("first collective")
            probe._hook("after_init_process_group", "comm", probe.phase)
            if probe.record["comm"].get("stalled"):
                from ddplint.runtime.dataprobe import AuditStop

                raise AuditStop
            probe.phase("first batch")
            return result

        return init_process_group

    def _hook(self, name: str, key: str, *args) -> None:
        fn = self._rank_hooks.get(name)
        if fn is None:
            return
        try:
            self.record[key] = fn(*args) or {}
        except Exception as exc:  # noqa: BLE001 - a machine check must not break the data audit
            self.record[key] = {"error": f"{type(exc).__name__}: {exc}"}

    # -- patches --

    def _forced_backend(self) -> str | None:
        import torch

        wanted = self.config["backend"]
        if wanted == "auto":
            return None if torch.cuda.is_available() else "gloo"
        return wanted

    def _patch_process_group(self) -> None:
        import torch.distributed as dist

        orig_destroy = dist.destroy_process_group
        probe = self

        def destroy_process_group(group=None):
            if group is None:
                probe.record["destroy_deferred"] = True
                return None
            return orig_destroy(group)

        dist.init_process_group = self._recording_init(dist.init_process_group, self._forced_backend())
        dist.destroy_process_group = destroy_process_group

    # -- the run --

    def run(self) -> int:
        import runpy

        self._hook("collect_rank_info", "info")
        self._patch_process_group()
        gpus = self.config.get("mapped_gpus") or int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # on the CPU
        if self.config.get("cuda_on_cpu"):
            from ddplint.runtime import cpucuda

            cpucuda.install(gpus)
            self.record["cuda_on_cpu"] = True
        mapped = gpus if self.config.get("cuda_on_cpu") else None
        settings = ownworkers.WorkerSettings(
            mapped,
            self._forced_backend(),
            self.config["steps"],
            self.config["epochs"],
            str(self.rundir.path) if self.rank == 0 else None,  # one job's workers are audited
            str(self.rundir.stack_path(self.rank)),
        )
        ownworkers.follow(settings, self._started_workers)
        _frameworks_on_cpu(self.record["world_size"])
        sys.argv = [self.script, *self.args]
        sys.path[0] = os.path.dirname(self.script)
        sys.dont_write_bytecode = True  # no __pycache__ in the user's tree
        self.audit(lambda: runpy.run_path(self.script, run_name="__main__"))
        if self.record["status"] == "raised":
            self.phase("raised")
            sys.stderr.write(self.record["error"]["text"])
            return 1
        if self.record["status"] == "terminated":
            self.phase("terminated")
            return 1
        self.phase("finished")
        self._exit_barrier()
        return 0

    def audit(self, body) -> BaseException | None:
        """Run `body` (the script, or a worker's function) with the recording patches installed,
        and write this process's record. Returns what the script raised, if anything."""
        from ddplint.runtime.dataprobe import AuditStop, LoaderTracker
        from ddplint.runtime.perfprobe import StepClock, TrainingObjects
        from ddplint.runtime.writeprobe import WriteRedirector

        keep = bool(self.config.get("keep_checkpoints"))  # --resume-args: a restart follows this run
        compared = bool(self.config.get("step_weights"))  # --resume-args: the run or its restart
        clock, objects = StepClock(weights=compared), TrainingObjects(note_loads=compared)
        clock.install()
        objects.install()

        def first_batch():
            clock.first_batch()
            self._hook("at_first_batch", "binding")

        tracker = LoaderTracker(self.config["steps"], self.config["epochs"], self.skip_dirs, self.phase, first_batch, clock)
        tracker.install()
        writes = WriteRedirector(
            self.rundir.scratch(self.rank, self.kind),
            redirect=not self.config.get("sandbox"),
            on_torch_save=objects.saved,
            position=tracker.position,
            keep_dir=self.rundir.kept(self.rank, self.kind) if keep else None,
        )
        writes.install()
        stderr = sys.stderr = _StderrTail(sys.stderr)
        sigterm = _Sigterm()
        previous = signal.signal(signal.SIGTERM, sigterm)
        raised: BaseException | None = None
        try:
            try:
                body()
            finally:
                sigterm.armed = False  # from here a SIGTERM waits until the record is written
            self.record["status"] = "completed"
        except AuditStop:
            self.record["status"] = "stopped"
        except Terminated:
            self.record["status"] = "terminated"
        except SystemExit as exc:
            if exc.code in (None, 0):
                self.record["status"] = "completed"
            else:
                raised = exc
                self.record["status"] = "raised"
                self.record["error"] = self._error(exc, f"SystemExit: {exc.code}")
                self.record["error"]["stderr_tail"] = stderr.tail(3)  # e.g. argparse's complaint
        except BaseException as exc:  # noqa: BLE001 - whatever the script raised is the finding
            raised = exc
            self.record["status"] = "raised"
            self.record["error"] = self._error(exc)
        finally:
            sys.stderr = stderr.stream
            perf = self._perf(clock)  # memory peaks before the anchor samples are read
            perf.loaded = list(objects.loaded)  # (before the read-back below loads its own)
            self.record["loaders"] = tracker.records()  # reads anchor samples: writes still redirected
            self._read_checkpoints(perf, writes, objects)
            if self.record["status"] != "terminated":
                _run_exit_handlers()  # what the interpreter's exit does, which os._exit skips
            writes.uninstall()
        self.record["perf"] = asdict(perf)
        self.record["training_site"] = tracker.training_site
        self.record["writes"] = writes.writes
        self.record["kept"] = writes.kept
        self.record["elapsed_s"] = round(time.time() - self.started, 3)
        self.rundir.write_record(self.rank, self.record, self.kind)
        signal.signal(signal.SIGTERM, previous)
        if sigterm.received and self.record["status"] in ("completed", "stopped"):
            self.record["status"] = "terminated"
        return raised

    def _started_workers(self, count: int) -> None:
        self.record["own_workers"] = self.record.get("own_workers", 0) + count

    def _perf(self, clock):
        from ddplint.runtime.perfprobe import mem_peak
        from ddplint.runtime.perfrecords import PerfRecord

        perf = PerfRecord(times=clock.times)
        with contextlib.suppress(Exception):  # never let a measurement break the audit
            perf.mem = mem_peak(clock)
        return perf

    def _read_checkpoints(self, perf, writes, objects) -> None:
        """Load back what this rank saved; not when torchrun is stopping the job."""
        from ddplint.runtime.perfprobe import read_checkpoints

        if self.record["status"] == "terminated":
            return
        with contextlib.suppress(Exception):
            perf.checkpoints = read_checkpoints(
                writes.writes, writes.readable, objects, coordinator=self.rank == 0, since=self.started - 1.0
            )
        perf.live = objects.live

    def _error(self, exc: BaseException, headline: str | None = None) -> dict:
        frames: list[traceback.FrameSummary] = list(traceback.extract_tb(exc.__traceback__))
        message = headline or f"{type(exc).__name__}: {exc}"
        worker = _spawned_failure(exc)
        if worker is not None:  # the traceback that matters is the worker's, inside the message
            frames, message = worker
        user = [
            f
            for f in frames
            if f.filename != __file__ and not f.filename.startswith(self.skip_dirs) and not f.filename.startswith("<")
        ]
        site = user[-1] if user else (frames[-1] if frames else None)
        first_line = message.strip().splitlines()[0] if message.strip() else message
        return {
            "type": type(exc).__name__,
            "message": first_line if len(first_line) <= 200 else first_line[:197] + "...",
            "site": None
            if site is None
            else {"file": site.filename, "line": site.lineno, "function": site.name, "code": site.line},
            "text": "".join(traceback.format_exception(exc)),
            "t": time.time(),
        }

    def _exit_barrier(self) -> None:
        """Wait until every rank has finished its script, through the store (not a collective)."""
        import datetime

        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        try:
            store = dist.distributed_c10d._get_default_store()
            world = dist.get_world_size()
            if store.add("ddplint/finished", 1) >= world:
                store.set("ddplint/all-finished", "1")
            else:
                store.wait(["ddplint/all-finished"], datetime.timedelta(seconds=self.config["timeout"]))
        except Exception:  # noqa: BLE001, S110
            pass  # a peer failed; torchrun and the launcher deal with it


class WorkerProbe(Probe):
    """A worker process rank 0's script started itself (mp.spawn): audited as a rank of the job
    the workers form, as if torchrun had started them. Its rank is the one its
    init_process_group gives it (its spawn index until then); its phase file is named by its
    spawn index, for the hang report. The machine checks and the progress stay with torchrun's
    processes."""

    kind = WORKER

    def __init__(self, rundir: RunDir, index: int, backend: str | None):
        super().__init__(rundir, sys.argv[0], sys.argv[1:])
        self.rank = self.index = index
        self.record.update(rank=index, local_rank=index, world_size=1, pid=os.getpid())  # until its init
        self.record["cuda_on_cpu"] = bool(self.config.get("cuda_on_cpu"))
        node = os.environ.get("GROUP_RANK")  # the node of the rank that started it
        self.record["info"] = {"hostname": self.record["node"], "pid": os.getpid(), "env": {"GROUP_RANK": node} if node else {}}
        self._rank_hooks.pop("collect_rank_info")  # the environment is torchrun's process's
        self._backend = backend

    def _phase_path(self):
        return self.rundir.phase_path(self.index, WORKER)  # its rank changes at its init

    def run_function(self, fn, index: int, args: tuple) -> None:
        import torch.distributed as dist

        def recording(original):
            return self._recording_init(original, self._backend, self._take_group_rank)

        ownworkers.replace_init_process_group(recording, fn)
        raised = self.audit(lambda: fn(index, *args))
        if self.record["status"] == "stopped" and dist.is_available() and dist.is_initialized():
            dist.barrier()  # every worker stops at the same batch; none leaves a peer waiting
            dist.destroy_process_group()
        if raised is not None:
            raise raised  # torch.multiprocessing reports it to the script's own process, as before
        if self.record["status"] == "terminated":
            raise SystemExit(1)

    def _take_group_rank(self) -> None:
        import torch.distributed as dist

        self.rank = self.record["rank"] = dist.get_rank()
        self.record["world_size"] = dist.get_world_size()


_TRACEBACK_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)\n(?:    (?P<code>.*)\n)?', re.M)


def _spawned_failure(exc: BaseException) -> tuple[list[traceback.FrameSummary], str] | None:
    """(the frames, the headline) of the worker whose failure torch.multiprocessing raised in
    the script's process (ProcessRaisedException): its traceback travels as text in the message."""
    index = getattr(exc, "error_index", None)
    text = str(exc)
    if index is None or "Traceback (most recent call last):" not in text:
        return None
    frames = [
        traceback.FrameSummary(m["file"], int(m["line"]), m["func"], line=m["code"] or None)
        for m in _TRACEBACK_FRAME.finditer(text)
    ]
    last = next((line for line in reversed(text.strip().splitlines()) if line and not line.startswith(" ")), "")
    return frames, f"{last} (in its worker {index}, mp.spawn)"


class _StderrTail:
    """sys.stderr, remembering the last lines written: a SystemExit (argparse, sys.exit(2))
    is explained there, not in a traceback."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self._lines: collections.deque[str] = collections.deque(maxlen=20)
        self._partial = ""

    def write(self, text: str) -> int:
        *done, self._partial = (self._partial + text).split("\n")
        self._lines.extend(line for line in done if line.strip())
        return self.stream.write(text)

    def tail(self, n: int) -> list[str]:
        lines = list(self._lines) + ([self._partial] if self._partial.strip() else [])
        return lines[-n:]

    def __getattr__(self, name):
        return getattr(self.stream, name)


class Terminated(BaseException):
    """SIGTERM from torchrun, which stops the other ranks once one has failed: the rank still
    writes what it recorded, marked as stopped from outside rather than as a failure."""


class _Sigterm:
    """The SIGTERM handler. While the script runs, torchrun's SIGTERM (sent once a peer has
    failed) stops it: Terminated. Once the script has ended, however it ended, the signal only
    waits: the rank must not die while it formats its error or writes what it recorded (on a
    loaded machine that takes a while; killed there, its record and loader data were lost)."""

    def __init__(self) -> None:
        self.armed = True
        self.received = False

    def __call__(self, signum, frame) -> None:
        self.received = True
        if self.armed:
            self.armed = False
            raise Terminated


def _frameworks_on_cpu(world_size: int) -> None:
    """A job audited on CPU must still run distributed the way it will on GPUs: accelerate's
    Accelerator() takes torchrun's environment as multi-process on GPUs, but on CPU only when
    told (what `accelerate launch --cpu` sets); without it every rank trains alone as main."""
    import torch

    if world_size > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


def _rank_hooks() -> dict:
    from ddplint.runtime.checks import rank

    return {
        "collect_rank_info": rank.collect_rank_info,
        "after_init_process_group": rank.after_init_process_group,
        "at_first_batch": rank.at_first_batch,
    }


def _run_exit_handlers() -> None:
    """The script's atexit handlers and logging's shutdown, run while writes are still recorded:
    a summary file every rank writes at exit is a shared write like any other. (A rank killed by
    SIGTERM would not run them.) Exceptions are printed and swallowed, as at interpreter exit."""
    import atexit
    import multiprocessing.util

    # multiprocessing's own handler joins non-daemonic children: a child left running would hang
    # the rank here, while run.leftover names it once the rank has ended
    atexit.unregister(multiprocessing.util._exit_function)  # type: ignore[attr-defined]  # (private, not in the stubs)
    atexit._run_exitfuncs()


def _stop_daemonic_children() -> None:
    """What interpreter exit does for multiprocessing's daemonic children, which os._exit skips:
    without it they would outlive the rank here and nowhere else (a false run.leftover)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.daemon:
            child.terminate()


def _exit_when_orphaned(launcher: int) -> None:
    """ddplint gone (even SIGKILLed): nothing will ever collect this rank; leave."""
    while True:
        try:
            os.kill(launcher, 0)
        except ProcessLookupError:
            os._exit(1)
        time.sleep(1.0)


def main() -> None:
    rundir = RunDir(sys.argv[1])
    rank = int(os.environ.get("RANK", "0"))
    rundir.write_small(rundir.pid_path(rank), str(os.getpid()))
    stack_file = open(rundir.stack_path(rank), "w")  # noqa: SIM115 - faulthandler writes there until exit
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    rundir.write_small(rundir.phase_path(rank), json.dumps({"phase": "startup", "since": time.time()}))
    launcher = int(os.environ.get(LAUNCHER_PID_ENV, "0"))
    if launcher > 0:
        threading.Thread(target=_exit_when_orphaned, args=(launcher,), daemon=True).start()
    code = Probe(rundir, sys.argv[2], sys.argv[3:]).run()
    sys.stdout.flush()
    sys.stderr.flush()
    _stop_daemonic_children()
    os._exit(code)


if __name__ == "__main__":
    main()
