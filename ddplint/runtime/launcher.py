"""Start the real torchrun with the probe in every rank, watch it, and leave nothing behind.

The launcher never imports torch. It picks or checks the master port (a stale listener makes
a c10d rendezvous hang for over a minute, so it is probed first), starts
`python -m torch.distributed.run ... -m ddplint.runtime.probe RUNDIR SCRIPT ARGS` in its own
session with its output captured in the run directory (each rank's stdout and stderr in files
of their own, see rankoutput), and polls the ranks' phase files for live progress.

In the sandbox (ddplint.runtime.sandbox) torchrun runs under the sandbox's keeper, in a PID
namespace: stopping the job is a SIGTERM to the keeper, whose init kills every process of the
namespace, and the kernel does the same should the keeper die. The ranks' pid files hold pids
of that namespace; they are translated to this side's pids for the stack dumps.

Without the sandbox, torchrun starts every rank in a session of its own, so the processes are
tracked by pid (torchrun's children and the ranks' pid files) and killed by process group; a
final sweep kills any process whose command line still names the run directory. Should
ddplint itself be SIGKILLed, torchrun dies with it (PR_SET_PDEATHSIG) and every rank exits once
ddplint is gone (the probe watches its pid).

On a timeout (the whole audit, or --rdzv-timeout spent in rendezvous or process-group init)
every rank dumps its Python stacks through faulthandler (SIGUSR1), then everything is killed.
SIGINT and SIGTERM to ddplint do the same cleanup (InterruptGuard, signals_deferred).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ddplint.runtime import sandbox as sbx
from ddplint.runtime.exits import Exit, killed_on_their_own
from ddplint.runtime.nodes import Nodes, RecordExchange
from ddplint.runtime.rankoutput import OutputReader, RankOutput
from ddplint.runtime.rundir import LAUNCHER_PID_ENV, WORKER, RunDir

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

POLL_S = 0.1
STACK_WAIT_S = 30.0  # the ranks' stack dumps: usually within a second, but a loaded machine is slow
WORKER_STACK_WAIT_S = 10.0  # all the ranks' children together: one that cannot dump is not waited on longer
CHILD_STACK_WAIT_S = 3.0  # one child's dump (a few kB, written at once by faulthandler)
DUMP_QUIET_POLLS = 3  # a dump is over when its file has not grown for this many polls
_MAIN_DONE = "in _run_module_as_main"  # the last frame faulthandler writes for the main thread
SANDBOX_STOP_S = 20.0  # for the sandbox's init to stop the job and write what it saw


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Hang:
    reason: str  # "timeout" | "rendezvous" | "init" | "comm setup"
    after_s: float  # since the launch
    limit_s: float  # the limit that ran out: --timeout, or --rdzv-timeout for rendezvous, init
    # and the communicator setup in the first collective
    phases: dict[int, dict]
    stacks: dict[int, str]  # by rank: its dump, then those of the processes it started
    workers: dict[int, dict] = field(default_factory=dict)  # phases of rank 0's own workers, by spawn index


@dataclass
class LaunchResult:
    returncode: int | None
    records: dict[int, RankRecord]
    phases: dict[int, dict]
    hang: Hang | None
    elapsed_s: float
    log_tail: str
    command: list[str] = field(default_factory=list)
    sandbox: sbx.Outcome | None = None  # what the sandbox's init saw, when there was one
    outputs: dict[int, RankOutput] = field(default_factory=dict)  # each rank's stdout and stderr
    killed: list[Exit] = field(default_factory=list)  # ranks dead of a signal torchrun did not send
    workers: dict[int, RankRecord] = field(default_factory=dict)  # rank 0's own workers (mp.spawn), by rank


def torchrun_command(
    rundir: RunDir,
    script: Path,
    script_args: tuple[str, ...],
    nproc: int,
    nnodes: int,
    node_rank: int,
    master_addr: str,
    master_port: int,
    rdzv_backend: str | None,
    rdzv_endpoint: str | None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(nnodes),
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
    ]
    if rdzv_backend or rdzv_endpoint:
        cmd += ["--rdzv-backend", rdzv_backend or "c10d", "--rdzv-endpoint", rdzv_endpoint or f"{master_addr}:{master_port}"]
    else:  # static rendezvous: fails fast when the port is taken
        cmd += ["--node-rank", str(node_rank), "--master-addr", master_addr, "--master-port", str(master_port)]
    # each rank's stdout and stderr into files of the run directory (see rankoutput)
    cmd += ["--log-dir", str(rundir.logs_path()), "--redirects", "3"]
    return cmd + ["-m", "ddplint.runtime.probe", str(rundir.path), str(script), *script_args]


def _child_env(sandboxed: bool) -> dict[str, str]:
    env = dict(os.environ)
    # The ranks must import this same ddplint: when it runs from a source tree rather than an
    # installed package, put that tree first (an installed one is already on the ranks' path).
    root = str(Path(__file__).resolve().parents[2])
    installed = {os.path.realpath(p) for k, p in sysconfig.get_paths().items() if k in ("purelib", "platlib")}
    if os.path.realpath(root) not in installed:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the user's tree
    if not sandboxed:  # (inside the sandbox this pid is not visible; the kernel cleans up)
        env[LAUNCHER_PID_ENV] = str(os.getpid())
    return env


def _proc_cmdline(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for the signal (Linux /proc): one without a handler
    would die of it (multiprocessing's resource tracker under SIGUSR1)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            caught = next((line.split()[1] for line in f if line.startswith("SigCgt:")), "0")
    except OSError:
        return False
    return bool(int(caught, 16) >> (signum - 1) & 1)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _children(pid: int) -> set[int]:
    kids: set[int] = set()
    if not os.path.isdir("/proc"):
        return kids
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.add(int(entry))
    return kids


def processes_naming(text: str) -> set[int]:
    """Pids of live processes whose command line contains `text` (Linux /proc)."""
    found: set[int] = set()
    if not os.path.isdir("/proc"):
        return found
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            cmd = _proc_cmdline(int(entry))
            if cmd and text in cmd:
                found.add(int(entry))
    return found


class Launch:
    def __init__(
        self,
        rundir: RunDir,
        command: list[str],
        world_local: int,
        timeout: float,
        rdzv_timeout: float,
        progress: Callable[[str], None],
        nodes: Nodes | None = None,
        sandbox: sbx.Plan | None = None,
        first_rank: int = 0,
        verbose: bool = False,
    ):
        self.rundir = rundir
        # several nodes: node 0 gathers every node's records, and each node reports them all
        self.exchange = RecordExchange(nodes, progress) if nodes and nodes.nnodes > 1 else None
        self.command = command
        self.world_local = world_local
        self.timeout = timeout
        self.rdzv_timeout = rdzv_timeout
        self.progress = progress
        self.proc: subprocess.Popen | None = None
        self.rank_pids: set[int] = set()
        self._shown: tuple | None = None
        self.sandbox = sandbox
        self.output = OutputReader(rundir.logs_path(), first_rank, sys.stderr if verbose else None)
        self._spawned = False  # torchrun has started the ranks: its rendezvous is over

    def run(self) -> LaunchResult:
        start = time.monotonic()
        hang = None
        if self.exchange is not None:
            self.exchange.open()
        command = self.command if self.sandbox is None else self.sandbox.command(self.command, os.getcwd())
        try:
            with open(self.rundir.log_path(), "wb") as log:
                self.proc = subprocess.Popen(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=_child_env(self.sandbox is not None),
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
            while self.proc.poll() is None:
                time.sleep(POLL_S)
                if self.sandbox is None:
                    self.rank_pids |= _children(self.proc.pid)
                phases = self.rundir.read_phases()
                self.output.poll()
                self._show(phases, time.monotonic() - start)
                hang = self._stalled(phases, time.monotonic() - start)
                if hang is not None:
                    hang.stacks = self._dump_stacks()
                    hang.workers = self.rundir.read_phases(WORKER)
                    break
        finally:
            with signals_deferred():
                self._kill_all()
                self.output.poll(final=True)
        from ddplint.runtime.records import RankRecord  # (numpy: only once the audit is under way)

        outputs = self.output.collect()
        records = self.rundir.read_records()
        if self.exchange is not None and not (hang and hang.reason == "rendezvous"):
            records = self.exchange.merge(records)  # (no node got past rendezvous: nothing to merge)
        return LaunchResult(
            returncode=None if hang else self.proc.returncode,
            records={rank: RankRecord.from_plain(plain) for rank, plain in records.items()},
            workers={r: RankRecord.from_plain(plain) for r, plain in self.rundir.read_records(WORKER).items()},
            phases=self.rundir.read_phases(),
            hang=hang,
            elapsed_s=time.monotonic() - start,
            # torchrun's own lines, then the end of every rank's stderr (NCCL's complaints)
            log_tail=_tail(self.rundir.log_path()) + "".join(o.stderr[-2000:] for _, o in sorted(outputs.items())),
            command=self.command,
            sandbox=sbx.Outcome.read(self.rundir.path) if self.sandbox is not None else None,
            outputs=outputs,
            killed=killed_on_their_own(_tail(self.rundir.log_path(), SUMMARY_BYTES)),
        )

    def _stalled(self, phases: dict[int, dict], elapsed: float) -> Hang | None:
        if elapsed >= self.timeout:
            return Hang("timeout", elapsed, self.timeout, phases, {})
        if elapsed >= self.rdzv_timeout and len(self.rundir.read_pids()) < self.world_local and not self._ranks_started():
            return Hang("rendezvous", elapsed, self.rdzv_timeout, phases, {})
        now = time.time()
        for p in phases.values():
            if p.get("phase") == "init" and now - p.get("since", now) >= self.rdzv_timeout:
                return Hang("init", elapsed, self.rdzv_timeout, phases, {})
            if p.get("phase") == "first collective" and now - p.get("since", now) >= self.rdzv_timeout:
                return Hang("comm setup", elapsed, self.rdzv_timeout, phases, {})
        return None

    def _ranks_started(self) -> bool:
        """torchrun has spawned rank processes (they may still be importing on a slow machine):
        rendezvous is over, whatever the ranks' own pid files say yet."""
        if not self._spawned:
            marker = f"ddplint.runtime.probe {self.rundir.path}"
            self._spawned = any(
                "torch.distributed.run" not in (_proc_cmdline(pid) or "torch.distributed.run") for pid in processes_naming(marker)
            )
        return self._spawned

    def _show(self, phases: dict[int, dict], elapsed: float) -> None:
        key = tuple(sorted((r, p.get("phase"), p.get("epoch")) for r, p in phases.items()))
        if key == self._shown:
            return
        self._shown = key
        if not phases:
            self.progress(f"[{elapsed:5.1f}s] rendezvous: waiting for {self.world_local} ranks")
            return
        parts = [f"rank {r} {describe_phase(p)}" for r, p in sorted(phases.items())]
        self.progress(f"[{elapsed:5.1f}s] {len(phases)}/{self.world_local} ranks reporting: " + ", ".join(parts))

    def _host_pids(self) -> dict[int, int]:
        """rank -> pid as this process sees it (the ranks write the pid of their namespace)."""
        pids = self.rundir.read_pids()
        if self.sandbox is None or self.proc is None:
            return pids
        namespace = sbx.pid_namespace(self.proc.pid)
        outer = sbx.outer_pids(namespace) if namespace else {}
        return {rank: outer[pid] for rank, pid in pids.items() if pid in outer}

    def _dump_stacks(self) -> dict[int, str]:
        pids = self._host_pids()
        for pid in pids.values():
            _signal(pid, signal.SIGUSR1)
        deadline = time.monotonic() + STACK_WAIT_S
        sizes = None
        while time.monotonic() < deadline:
            time.sleep(POLL_S * 2)
            stacks = {r: s for r, s in self.rundir.read_stacks().items() if r in pids}
            now = {r: len(s) for r, s in stacks.items()}
            # complete: the main thread's outermost frame is written, and nothing more comes
            if now == sizes and len(now) == len(pids) and all(_MAIN_DONE in s for s in stacks.values()):
                break
            sizes = now
        self._dump_workers(pids)
        return self.rundir.read_stacks()

    def _dump_workers(self, pids: dict[int, int]) -> None:
        """Then the ranks' children: a forked one (a DataLoader worker) inherited the rank's
        faulthandler and its stack file, a spawned one (mp.spawn) registered its own on that
        file (ownworkers), so each appends its dump after the rank's. One at a time: dumps
        written together would interleave line by line. A child without a handler (one still
        starting, multiprocessing's resource tracker) is left alone."""
        deadline = time.monotonic() + WORKER_STACK_WAIT_S
        for rank, pid in pids.items():
            path = self.rundir.stack_path(rank)
            for kid in sorted(_children(pid)):
                if not _catches(kid, signal.SIGUSR1):
                    continue
                before = last = _size(path)
                _signal(kid, signal.SIGUSR1)
                until = min(deadline, time.monotonic() + CHILD_STACK_WAIT_S)
                quiet = 0
                while time.monotonic() < until and quiet < DUMP_QUIET_POLLS:  # grown, then still a while
                    time.sleep(POLL_S)
                    now = _size(path)
                    quiet = quiet + 1 if now == last > before else 0
                    last = now

    def _kill_all(self) -> None:
        if self.proc is None:
            return
        marker = str(self.rundir.path)
        if self.sandbox is not None and self.proc.poll() is None:
            # the init stops the job, notes what was left, and the namespace dies with it
            _signal(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=SANDBOX_STOP_S)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.rank_pids |= _children(self.proc.pid)
        for pid in self.rank_pids | set(self.rundir.read_pids().values()):
            cmd = _proc_cmdline(pid)
            if cmd is None or marker in cmd:  # never a recycled pid of someone else
                _killpg(pid)
        _killpg(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for _ in range(50):
            left = processes_naming(marker)
            if not left:
                break
            for pid in left:
                _signal(pid, signal.SIGKILL)
            time.sleep(POLL_S)


def describe_phase(p: dict) -> str:
    phase = p.get("phase", "?")
    if phase == "step":
        return f"step {p.get('step')} (epoch {p.get('epoch')})"
    if phase == "epoch end":
        return f"epoch end (epoch {p.get('epoch')})"
    return phase


def _die_with_parent() -> None:
    """In torchrun's process: SIGKILL it when ddplint dies, even by SIGKILL (Linux); the ranks
    see ddplint gone and exit too (the probe's watchdog)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        _signal(pid, signal.SIGKILL)


@contextlib.contextmanager
def signals_deferred():
    """Hold SIGINT and SIGTERM back while cleaning up; they arrive (and interrupt) after."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class InterruptGuard:
    """SIGINT and SIGTERM raise Interrupted once, wherever the audit is; a second signal
    during the cleanup that follows is ignored, so the cleanup always finishes."""

    def __init__(self) -> None:
        self.old: dict = {}
        self.raised = False

    def __enter__(self) -> InterruptGuard:
        try:
            self.old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: the caller owns signal handling
            self.old = {}
        return self

    def _handle(self, signum, frame):
        if not self.raised:
            self.raised = True
            raise Interrupted(signum)

    def __exit__(self, *exc) -> None:
        for s, handler in self.old.items():
            signal.signal(s, handler)


SUMMARY_BYTES = 1 << 16  # torchrun's failure summary, one block per failed rank, ends its log


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")
