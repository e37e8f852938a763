"""run.reached, run.failure and run.hang: did the ranks reach the training data, did every rank
run its script to the audit's end, and if not, why.

A failure is told from the first rank that raised (by time): later failures of other ranks are
usually consequences (a peer closed the connection). A hang is told from the phase files and
the faulthandler stacks the ranks dumped on SIGUSR1 before they were killed. Ranks blocked at
different lines of the script in collectives or p2p calls point at DDP401.
"""

from __future__ import annotations

import errno
import linecache
import os
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ddplint.runtime.checks.causes import cause_of
from ddplint.runtime.checks.comm import NCCL_HINT, last_nccl_line
from ddplint.runtime.checks.containment import READ_ONLY_FIX
from ddplint.runtime.checks.data import Loader
from ddplint.runtime.exits import Exit
from ddplint.runtime.launcher import LaunchResult, describe_phase
from ddplint.runtime.registry import IO_SANDBOX, RUN_FAILURE, RUN_HANG, RUN_REACHED
from ddplint.runtime.sites import is_own_file, is_user_file, short
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankError, RankRecord

SPAWNED_BY_EVERY_RANK_FIX = (
    "a script that starts one worker per GPU itself (mp.spawn) runs once per node: audit it with "
    "--nproc-per-node 1 (and --mapped-gpus N, the GPUs it would see, on a machine without GPUs)"
)

_FRAME = re.compile(r'^\s*File "(?P<file>.+)", line (?P<line>\d+) in (?P<func>\S+)')
_THREAD = re.compile(r"^(Current thread|Thread) ")


@dataclass
class Frame:
    file: str
    line: int
    func: str

    def where(self, base: str) -> str:
        return f"{short(self.file, base)}:{self.line}"


def _threads(dump: str) -> list[list[Frame]]:
    threads: list[list[Frame]] = []
    for line in dump.splitlines():
        if _THREAD.match(line):
            threads.append([])
        elif threads and (m := _FRAME.match(line)):
            threads[-1].append(Frame(m["file"], int(m["line"]), m["func"]))
    return threads


def _in_worker(frames: list[Frame]) -> bool:
    """A DataLoader worker's thread: forked from the rank, it carries the rank's outer frames too."""
    return any(f.func == "_worker_loop" and "/torch/utils/data/" in f.file for f in frames)


def _spawned_at(frames: list[Frame]) -> int | None:
    """Where the frames of a worker the script spawned itself (mp.spawn) enter ddplint's wrapper
    of its function (ownworkers), or None for a thread of another process."""
    wrapper = "ddplint/runtime/ownworkers.py"
    return next((i for i, f in enumerate(frames) if f.func == "_worker" and f.file.endswith(wrapper)), None)


def main_thread_frames(dump: str) -> list[Frame]:
    """Innermost-first frames of the thread that runs the probe (and so the user's script)."""
    threads = [t for t in _threads(dump) if not _in_worker(t) and _spawned_at(t) is None]
    for frames in threads:
        if any(f.file.endswith("ddplint/runtime/probe.py") and f.func == "main" for f in frames):
            return frames
    return threads[-1] if threads else []


def busy_workers(dump: str) -> list[list[Frame]]:
    """Of each DataLoader worker that dumped its stack after the rank, the frames inside its
    loop, when it is fetching a batch (an idle worker waits for indices: nothing to show)."""
    busy = []
    for thread in _threads(dump):
        if _in_worker(thread):
            inside = thread[: next(i for i, f in enumerate(thread) if f.func == "_worker_loop")]
            if any(f.func == "fetch" and "/torch/utils/data/" in f.file for f in inside):
                busy.append(inside)
    return busy


def spawned_workers(dump: str) -> list[list[Frame]]:
    """Of each worker the rank's script spawned itself that dumped its stack after the rank, the
    frames of the function it was handed (its other threads, and ddplint's wrapper, left out)."""
    inside = []
    for thread in _threads(dump):
        at = _spawned_at(thread)
        if at is not None:
            inside.append([f for f in thread[:at] if not is_own_file(f.file)])
    return inside


def blocked_at(frames: list[Frame]) -> tuple[Frame | None, Frame | None]:
    """(the torch.distributed call it waits in, the innermost frame of the user's code)."""
    call = next(
        (f for f in frames if "/torch/distributed/" in f.file and not f.func.startswith("_") and f.func != "wrapper"), None
    )
    user = next((f for f in frames if is_user_file(f.file)), None)
    return call, user


def check_reached(
    loaders: list[Loader],
    failure: CheckResult,
    hang: CheckResult,
    allowed: bool,
    own_workers: int = 0,
    audited_workers: int = 0,
) -> CheckResult:
    """A run whose ranks never reached a DataLoader batch audited nothing of the data: not a PASS.
    `own_workers`: processes the ranks' scripts started themselves (mp.spawn); `audited_workers`:
    how many of them (rank 0's) the data checks followed in the ranks' place."""
    batches = sum(e.yielded for loader in loaders for rec in loader.per_rank.values() for e in rec.epochs)
    if batches:
        who = (
            f"the {audited_workers} worker process(es) rank 0's script started itself (mp.spawn), audited as the job's ranks,"
            if audited_workers
            else "the ranks"
        )
        return CheckResult(
            RUN_REACHED,
            Status.PASS,
            f"{who} read {batches} batch(es) from {len(loaders)} DataLoader(s)",
            data={"loaders": len(loaders), "audited_workers": audited_workers},
        )
    if Status.FAIL in (failure.status, hang.status):
        return CheckResult(
            RUN_REACHED,
            Status.SKIP,
            f"no rank reached a DataLoader batch before the run failed (see {RUN_FAILURE} and {RUN_HANG})",
            data={"loaders": 0},
        )
    summary = "no rank reached a DataLoader batch: the script ended without iterating one, so the data checks audited nothing"
    fix = (
        "pass the arguments that make the script train (everything after the script path "
        "is the script's), or --allow-no-data for a script without a DataLoader"
    )
    if own_workers and not audited_workers:
        summary = (
            f"no rank reached a DataLoader batch: the script trained in {own_workers} worker process(es) "
            "it started itself (mp.spawn), which the data, write and step checks do not follow"
        )
        fix = (
            "audit the script in the mode where torchrun starts the ranks (run it as torchrun "
            "would, without its own spawning), or --allow-no-data to accept the run's other checks"
        )
    data = {"loaders": 0, "own_workers": own_workers}
    if allowed:
        return CheckResult(RUN_REACHED, Status.INFO, summary + " (--allow-no-data)", data=data)
    return CheckResult(
        RUN_REACHED,
        Status.FAIL,
        summary,
        data=data,
        fix=fix,
    )


def check_failure(result: LaunchResult, world: int, base: str) -> CheckResult:
    records = result.records
    raised = sorted((r for r in records.values() if r.status == "raised" and r.error), key=_raised_at)
    missing = [r for r in range(world) if r not in records]
    killed = [e for e in result.killed if e.rank not in records]
    if killed:
        return _killed(killed, raised, result)
    if raised:
        # a worker of rank 0's own (mp.spawn) that raised first is why rank 0 raised; one that
        # raised after another rank failed was stopped by the teardown (KeyboardInterrupt)
        workers = sorted((w for w in result.workers.values() if w.status == "raised" and w.error), key=_raised_at)
        failures = sorted([("worker", w) for w in workers] + [("rank", r) for r in raised], key=lambda f: _raised_at(f[1]))
        kind, first = failures[0]
        who = f"worker {first.rank} of rank 0's script (mp.spawn)" if kind == "worker" else f"rank {first.rank}"
        err = _error(first)
        site = err.site
        where = f" at {short(site.file, base)}:{site.line} in {site.function}" if site else ""
        evidence = [f"    {site.code}"] if site and site.code else []
        evidence += [f"    {line}" for line in err.stderr_tail]
        for kind, other in failures[1:]:
            evidence.append(f"{kind} {other.rank} then failed: {_error(other).message.strip() or _error(other).type}")
        stopped = sorted([r.rank for r in records.values() if r.status == "terminated"] + missing)
        if stopped:
            evidence.append(f"rank(s) {', '.join(map(str, stopped))} stopped by torchrun after the failure")
        cause = cause_of(err.message, err.text, "\n".join(err.stderr_tail))
        if cause is not None:
            evidence.insert(0, f"cause: {cause.what}")
        spawning = sorted(r.rank for r in records.values() if r.own_workers)
        if len(spawning) > 1:  # torchrun's processes each started a job of their own
            evidence.append(f"ranks {', '.join(map(str, spawning))} each started workers of their own (mp.spawn)")
        sealed = result.sandbox.read_only if result.sandbox is not None else []
        if sealed and os.strerror(errno.EROFS) in err.message:  # the audit's doing, not the script's
            return CheckResult(
                RUN_FAILURE,
                Status.WARN,
                f"{who} could not write: {err.message}{where}; the audit made {', '.join(sealed)} read-only "
                f"(see {IO_SANDBOX}), so the run was not audited past that write",
                evidence,
                fix=READ_ONLY_FIX,
                data={"ranks": [_raised_json(r) for r in raised], "workers": [_raised_json(w) for w in workers]},
            )
        return CheckResult(
            RUN_FAILURE,
            Status.FAIL,
            f"{who} raised {err.message}{where}",
            evidence,
            fix=cause.fix if cause else SPAWNED_BY_EVERY_RANK_FIX if len(spawning) > 1 else None,
            data={"ranks": [_raised_json(r) for r in raised], "workers": [_raised_json(w) for w in workers]},
        )
    if result.hang is not None:
        return CheckResult(RUN_FAILURE, Status.SKIP, f"no rank raised before the audit timed out (see {RUN_HANG})")
    if missing:
        tail = [line for line in result.log_tail.strip().splitlines()[-6:]]
        what = (
            "torchrun failed before any rank reported"
            if len(missing) == world
            else f"rank(s) {', '.join(map(str, missing))} ended without reporting (killed or crashed)"
        )
        return CheckResult(
            RUN_FAILURE,
            Status.FAIL,
            f"{what}; torchrun exit status {result.returncode}",
            tail,
            data={"missing_ranks": missing, "returncode": result.returncode},
        )
    terminated = sorted(r.rank for r in records.values() if r.status == "terminated")
    if terminated:
        return CheckResult(
            RUN_FAILURE,
            Status.FAIL,
            f"rank(s) {', '.join(map(str, terminated))} got SIGTERM before the audit's end",
            result.log_tail.strip().splitlines()[-6:],
            data={"terminated_ranks": terminated, "returncode": result.returncode},
        )
    evidence = []
    if result.returncode:
        evidence.append(
            f"torchrun exit status {result.returncode} after every rank finished its script (process teardown, not the script)"
        )
    ends = sorted({str(r.status) for r in records.values()})
    how = (
        "were stopped by the audit"
        if ends == ["stopped"]
        else "finished the script"
        if ends == ["completed"]
        else "finished or were stopped"
    )
    return CheckResult(
        RUN_FAILURE, Status.PASS, f"all {world} ranks {how} without an error", evidence, data={"returncode": result.returncode}
    )


def _error(rec: RankRecord) -> RankError:
    assert rec.error is not None  # only ranks that raised are asked
    return rec.error


def _raised_at(rec: RankRecord) -> float:
    return _error(rec).t


def _raised_json(rec: RankRecord) -> dict:
    """The report's entry of a rank that raised: its error without the time it was caught."""
    error = {k: v for k, v in asdict(_error(rec)).items() if k != "t" and not (k == "stderr_tail" and not v)}
    return {"rank": rec.rank, **error}


def _killed(killed: list[Exit], raised: list[RankRecord], result: LaunchResult) -> CheckResult:
    """A rank died of a signal: the root cause, whatever its peers raised afterwards."""
    first = killed[0]
    evidence = [f"{e.what()} (exit status {e.code})" for e in killed[1:]]
    evidence += [f"rank {r.rank} then failed: {_error(r).message}" for r in raised]
    return CheckResult(
        RUN_FAILURE,
        Status.FAIL,
        first.what(),
        evidence,
        fix=first.fix(),
        data={
            "killed": [{"rank": e.rank, "signal": e.signal.name if e.signal else None, "exit_status": e.code} for e in killed],
            "missing_ranks": [e.rank for e in killed],
            "ranks": [_raised_json(r) for r in raised],
            "returncode": result.returncode,
        },
    )


def _at(frame: Frame | None, base: str) -> str:
    """' at file:line: code' of a frame, or nothing."""
    if frame is None:
        return ""
    code = linecache.getline(frame.file, frame.line).strip()
    return f" at {frame.where(base)}" + (f": {code}" if code else "")


ITERATED = ("first batch", "step", "epoch end", "finished")  # phases of a process past its first batch


def _stuck(call: Frame | None, user: Frame | None, frames: list[Frame], base: str) -> dict:
    """Where one hung process waits, in the report's data."""
    return {
        "call": call.func if call else None,
        "location": user.where(base) if user else None,
        "stack": [f"{f.file}:{f.line} in {f.func}" for f in frames],
    }


def check_hang(result: LaunchResult, world: int, base: str, timeout: float) -> CheckResult:
    hang = result.hang
    if hang is None:
        return CheckResult(
            RUN_HANG,
            Status.PASS,
            f"finished in {result.elapsed_s:.1f} s (timeout {timeout:g} s)",
            data={"elapsed_s": round(result.elapsed_s, 3)},
        )
    ranks, evidence, user_lines, split_workers = [], [], set(), False
    for rank in range(world):
        phase = hang.phases.get(rank)
        dump = hang.stacks.get(rank, "")
        frames = main_thread_frames(dump)
        call, user = blocked_at(frames)
        if phase is not None and phase.get("phase") == "finished":
            evidence.append(f"rank {rank}: finished its script, waiting for the other ranks")
            call = user = None
        else:
            state = "never started (rendezvous)" if phase is None else describe_phase(phase)
            evidence.append(
                f"rank {rank}: {state}"
                + (f", waiting in {call.func}()" if call else "")
                + _at(user or next((f for f in frames if not is_own_file(f.file)), None), base)
            )
            if call is not None and user is not None:
                user_lines.add((user.file, user.line))
        for worker in busy_workers(dump):
            stuck = next((f for f in worker if is_user_file(f.file)), worker[0])
            evidence.append(f"  rank {rank}'s DataLoader worker is fetching, in {stuck.func}(){_at(stuck, base)}")
        spawned, spawned_lines = [], set()  # each rank's workers form a job of their own
        for frames_of in spawned_workers(dump):
            wait, where = blocked_at(frames_of)
            where = where or (frames_of[0] if frames_of else None)
            evidence.append(
                f"  rank {rank}'s own worker (mp.spawn) "
                + (f"waits in {wait.func}()" if wait else f"is in {where.func}()" if where else "has no frame of its own")
                + _at(where, base)
            )
            spawned.append(_stuck(wait, where, frames_of, base))
            if wait is not None and where is not None:
                spawned_lines.add((where.file, where.line))
        split_workers = split_workers or len(spawned_lines) > 1
        ranks.append(
            {
                "rank": rank,
                "phase": phase.get("phase") if phase else "rendezvous",
                "step": (phase or {}).get("step"),
                "epoch": (phase or {}).get("epoch"),
                **_stuck(call, user, frames, base),
                "workers": spawned,
            }
        )
    if hang.workers:
        evidence.append(
            "rank 0's own workers, audited: "
            + ", ".join(f"worker {i} {describe_phase(p)}" for i, p in sorted(hang.workers.items()))
        )
    if (
        hang.reason == "timeout"
        and not any(r["call"] or any(w["call"] for w in r["workers"]) for r in ranks)
        and not any(r["phase"] in ITERATED for r in ranks)
        and not any(p.get("phase") in ITERATED for p in hang.workers.values())
    ):
        evidence.append(
            "no rank waits in torch.distributed and no DataLoader was iterated: the audit "
            "stops a script only at the epochs of its training DataLoader"
        )
    if hang.reason == "rendezvous":
        summary = f"rendezvous did not complete within {hang.limit_s:g} s"
    elif hang.reason == "init":
        summary = f"init_process_group did not return within {hang.limit_s:g} s"
    elif hang.reason == "comm setup":
        summary = (
            f"stalled in communicator setup: the first collective after "
            f"init_process_group did not complete within {hang.limit_s:g} s"
        )
        nccl = last_nccl_line(result.log_tail)
        evidence.append(
            f"NCCL's last line: {nccl}" if nccl else "NCCL said nothing: rerun with NCCL_DEBUG=WARN to see why it waits"
        )
    else:
        summary = f"the ranks did not finish within {hang.limit_s:g} s"
    rule = fix = None
    if any(r["phase"] in ("init", "first collective") for r in ranks):
        fix = NCCL_HINT
    if len(user_lines) > 1 or split_workers:
        summary += ": ranks are blocked in different collective calls"
        rule = "DDP401"
        fix = "every rank must call the same collectives in the same order; move them out of rank-conditional code"
    return CheckResult(
        RUN_HANG,
        Status.FAIL,
        summary,
        evidence,
        fix=fix,
        rule=rule,
        data={"reason": hang.reason, "after_s": round(hang.after_s, 3), "limit_s": hang.limit_s, "ranks": ranks},
    )
