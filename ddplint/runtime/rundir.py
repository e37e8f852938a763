"""The run directory: how the launcher and the ranks' probes talk without a network.

Every file here is written by exactly one rank and read by the launcher: the audit
configuration (written by the launcher), and per rank a pid file (first thing the probe
does, so the launcher can signal and kill it), a phase file (rewritten at each phase change,
read for live progress and for the hang report), a faulthandler stack file (filled on
SIGUSR1 when the audit times out, by the rank and then by each process it started), the final
record (pickled, written atomically), and the scratch tree where the script's writes are
redirected; and the phase, record and scratch tree of each worker process rank 0's script
starts itself (ownworkers). Records are pickled because they
carry index arrays of whole epochs; only ddplint itself writes them.
"""

from __future__ import annotations

import fcntl
import json
import os
import pickle
import tempfile
import time
from pathlib import Path

CONFIG = "config.json"
PREFIX = "ddplint-run-"
LOCK = "owner.lock"  # held by the ddplint process that owns the run directory, for its lifetime
UNLOCKED_STALE_S = 24 * 3600  # a run directory without a lock file (the moment it is made) is left a day
LAUNCHER_PID_ENV = "DDPLINT_LAUNCHER_PID"  # ranks exit when this process is gone
SCRATCH = "scratch"
RANK = "rank"  # the files of a process torchrun started
WORKER = "worker"  # the record and scratch of a worker rank 0's script started itself (mp.spawn)


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.lock_fd: int | None = None

    @classmethod
    def create(cls) -> RunDir:
        """A new run directory in the temp directory, locked until this process ends (however it
        ends: the kernel drops the lock of a SIGKILLed process, so the next audit can tell)."""
        rundir = cls(tempfile.mkdtemp(prefix=PREFIX))
        lock = rundir.path / LOCK
        fd = os.open(lock.with_suffix(".new"), os.O_CREAT | os.O_RDWR, 0o600)  # not inherited by children
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(lock.with_suffix(".new"), lock)  # visible only once held
        rundir.lock_fd = fd
        return rundir

    def unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

    def config_path(self) -> Path:
        return self.path / CONFIG

    def write_config(self, config: dict) -> None:
        self.config_path().write_text(json.dumps(config))

    def read_config(self) -> dict:
        return json.loads(self.config_path().read_text())

    def pid_path(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.pid"

    def phase_path(self, rank: int, kind: str = RANK) -> Path:
        return self.path / f"{kind}-{rank}.phase"

    def stack_path(self, rank: int) -> Path:
        return self.path / f"rank-{rank}.stack"

    def record_path(self, rank: int, kind: str = RANK) -> Path:
        return self.path / f"{kind}-{rank}.record"

    def scratch(self, rank: int, kind: str = RANK) -> Path:
        return self.path / SCRATCH / f"{kind}-{rank}"

    def kept(self, rank: int, kind: str = RANK) -> Path:
        """Where the rank keeps the first version of each checkpoint it saves (--resume-args)."""
        return self.path / "kept" / f"{kind}-{rank}"

    def log_path(self) -> Path:
        return self.path / "torchrun.log"

    def logs_path(self) -> Path:
        """torchrun's --log-dir: each rank's stdout and stderr (see rankoutput)."""
        return self.path / "logs"

    def clear_ranks(self) -> None:
        """Forget a finished job's per-rank files and logs, so the next job in this run directory
        (a restart, under the same copy-on-write layers) reports afresh."""
        from ddplint.runtime.sandbox import OUTCOME, remove_tree

        for kind in (RANK, WORKER):
            for p in self.path.glob(f"{kind}-*.*"):
                p.unlink(missing_ok=True)
        for p in (self.log_path(), self.path / OUTCOME):
            p.unlink(missing_ok=True)
        remove_tree(self.logs_path())

    # -- written by the probe, with the interpreter's own open (never the patched one) --

    def write_small(self, path: Path, text: str) -> None:
        tmp = path.with_name(path.name + ".tmp")
        with _real_open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, path)

    def write_record(self, rank: int, record: dict, kind: str = RANK) -> None:
        path = self.record_path(rank, kind)
        tmp = path.with_name(path.name + ".tmp")
        with _real_open(tmp, "wb") as f:
            pickle.dump(record, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)

    # -- read by the launcher --

    def ranks_with(self, suffix: str, kind: str = RANK) -> dict[int, Path]:
        found = {}
        for p in self.path.glob(f"{kind}-*.{suffix}"):
            try:
                found[int(p.name[len(kind) + 1 : -len(suffix) - 1])] = p
            except ValueError:
                continue
        return found

    def read_pids(self) -> dict[int, int]:
        pids = {}
        for rank, p in self.ranks_with("pid").items():
            try:
                pids[rank] = int(p.read_text().strip())
            except (OSError, ValueError):
                continue
        return pids

    def read_phases(self, kind: str = RANK) -> dict[int, dict]:
        phases = {}
        for rank, p in self.ranks_with("phase", kind).items():
            try:
                phases[rank] = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
        return phases

    def read_records(self, kind: str = RANK) -> dict[int, dict]:
        records = {}
        for rank, p in self.ranks_with("record", kind).items():
            try:
                with open(p, "rb") as f:
                    records[rank] = pickle.load(f)
            except (OSError, pickle.UnpicklingError, EOFError):
                continue
        return records

    def read_stacks(self) -> dict[int, str]:
        stacks = {}
        for rank, p in self.ranks_with("stack").items():
            try:
                stacks[rank] = p.read_text(errors="replace")
            except OSError:
                continue
        return stacks


def stale_run_dirs(parent: str) -> list[Path]:
    """Run directories of this user's audits that ended without removing theirs (ddplint killed
    by SIGKILL or the machine stopping): nobody holds their lock."""
    stale = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith(PREFIX):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat().st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(entry.path, LOCK), os.O_RDWR)
        except FileNotFoundError:
            if _age_s(entry.path) > UNLOCKED_STALE_S:
                stale.append(Path(entry.path))
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            stale.append(Path(entry.path))
        except OSError:  # a live audit holds it
            pass
        finally:
            os.close(fd)
    return stale


def _age_s(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return 0.0


# The probe replaces builtins.open while the user's script runs; the run directory must keep
# using the interpreter's own. Bound at import, which happens before any patching.
_real_open = open
