"""io.sandbox and run.leftover: what the sandbox kept off the user's disk, and which processes
the job left running.

The upper layers are the ground truth of what the job wrote; the probe's records say which
rank wrote a path through Python's file calls, and from which line. A path the probe did not
see was written by C code, a subprocess or a child process: its rank is unknown.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddplint.runtime.registry import IO_SANDBOX, RUN_LEFTOVER
from ddplint.runtime.sandbox import Change, Outcome
from ddplint.runtime.sites import short
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord

UNSEEN = "written outside Python's file calls, rank unknown"
SHOWN = 40  # evidence lines of changes; the JSON report has them all
_REDIRECTED = (
    "redirected: open/io.open/os.open for writing, torch.save to a path, logging's FileHandler, "
    "os.makedirs/mkdir/remove/unlink/rename/replace"
)
_PROCESSES = "not contained: processes started in a new session or as daemons may outlive the audit"
_NOT_CONTAINED = (
    "not contained: writes by C extensions, subprocesses and os.system, shutil.rmtree, os.rmdir, "
    "truncate, chmod/chown/utime, links, FIFOs, sqlite, and a library's writes to the temp "
    "directory and ~/.cache: they may have changed your files and are not listed"
)


@dataclass(frozen=True)
class Containment:
    """How the job was contained: what the sandbox reported after the run, or why there was none."""

    roots: tuple[str, ...] = ()  # directories asked to be overlaid at their own place (see plan_roots)
    covered: tuple[str, ...] = ()  # directories under a copy-on-write layer (/ first)
    in_memory: tuple[str, ...] = ()  # directories rebuilt on a tmpfs (a user namespace)
    read_only: tuple[str, ...] = ()  # writable mounts the job saw read-only: a write there failed
    uncontained: tuple[str, ...] = ()  # writable mounts the job saw as they are
    unavailable: str | None = None  # the kernel or a container forbids namespaces: why
    disabled: bool = False  # --no-sandbox
    reported: bool = False  # the sandbox wrote its outcome

    @property
    def sandboxed(self) -> bool:
        return not self.disabled and self.unavailable is None


def probe_writes(
    records: dict[int, RankRecord], libraries: bool, workers: dict[int, RankRecord] | None = None
) -> dict[str, dict]:
    """path -> {"ranks", "ops", "sites"} of every write the probes recorded, directories too
    (the audited workers of rank 0's script by their own rank); with `libraries`, also a
    library's own writes to the temp directory or ~/.cache."""
    seen: dict[str, dict] = {}
    for rank, rec in [*sorted(records.items()), *sorted((workers or {}).items())]:
        for w in rec.writes:
            if w.library and not libraries:
                continue
            entry = seen.setdefault(w.path, {"ranks": [], "ops": [], "sites": []})
            for key, value in (("ranks", rank), ("ops", w.op), ("sites", w.site)):
                if value is not None and value not in entry[key]:
                    entry[key].append(value)
    return seen


def writes_report(
    changes: list[Change] | None, records: dict[int, RankRecord], workers: dict[int, RankRecord] | None = None
) -> list[dict]:
    """The report's `writes`: every change of the layers with its ranks where the probe saw it,
    then what the probe saw that left no trace (a temporary file removed again). Without the
    sandbox (changes is None): what the probe saw. A library's temp-directory writes only name
    the ranks of a change; alone they are its plumbing (sockets, caches), not the script's."""
    seen, libraries = probe_writes(records, False, workers), probe_writes(records, True, workers)
    out = []
    for c in changes or []:
        entry = seen.pop(c.path, None) or libraries.get(c.path)
        out.append(
            {
                "path": c.path,
                "change": c.kind.value,
                "type": c.type,
                "detail": list(c.detail),
                **(entry or {"ranks": [], "ops": [], "sites": []}),
                "seen_by_probe": entry is not None,
            }
        )
    for path, entry in sorted(seen.items()):
        out.append({"path": path, "change": None, "type": None, "detail": [], **entry, "seen_by_probe": True})
    return out


def _change_line(w: dict, base: str) -> str:
    what = f"{w['change']:<8} {short(w['path'], base)}"
    if w["type"] not in ("file", None):
        what += f" ({w['type']})"
    if w["detail"]:
        what += f" [{', '.join(w['detail'])}]"
    if not w["seen_by_probe"]:
        return f"{what}: {UNSEEN}"
    ranks = ", ".join(map(str, w["ranks"]))
    sites = ", ".join(short(s, base) for s in w["sites"][:2])
    return f"{what}: rank{'s' if len(w['ranks']) > 1 else ''} {ranks}" + (f" at {sites}" if sites else "")


READ_ONLY_FIX = (
    "the kernel refuses a copy-on-write layer over some file systems (an overlay already two "
    "deep, some network or FUSE mounts); point the script's outputs at another directory for "
    "the audit, or rerun with --no-sandbox to let it write there (its writes then reach your disk)"
)


def check_sandbox(containment: Containment, writes: list[dict], base: str) -> CheckResult:
    data = {
        "sandboxed": containment.sandboxed,
        "covered": list(containment.covered),
        "in_memory": list(containment.in_memory),
        "read_only": list(containment.read_only),
        "not_contained": list(containment.uncontained),
        "unavailable": containment.unavailable,
        "disabled": containment.disabled,
    }
    if not containment.sandboxed:
        why = (
            "turned off with --no-sandbox"
            if containment.disabled
            else f"namespaces are not available here ({containment.unavailable})"
        )
        return CheckResult(
            IO_SANDBOX,
            Status.WARN,
            f"not contained: {why}; only Python's file calls were redirected",
            [_REDIRECTED, _NOT_CONTAINED, _PROCESSES],
            fix=None
            if containment.disabled
            else "allow unprivileged user namespaces (Ubuntu: sysctl "
            "kernel.apparmor_restrict_unprivileged_userns=0; containers: --security-opt seccomp=unconfined), "
            "or run the audit where they are allowed",
            data=data,
        )
    changed = [w for w in writes if w["change"] is not None]
    counts = {k: sum(w["change"] == k for w in changed) for k in ("created", "modified", "deleted")}
    data["changes"] = counts
    said = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "no path changed"
    if not containment.reported:
        return CheckResult(
            IO_SANDBOX,
            Status.WARN,
            f"{said} in the job's copy-on-write layer, discarded; what else the job could reach is unknown "
            "(the sandbox wrote no outcome)",
            [_change_line(w, base) for w in changed[:SHOWN]],
            data=data,
        )
    evidence = [
        f"copy-on-write over the whole file system: {', '.join(containment.covered)}; "
        "/proc, /sys and /dev the host's own (/dev/shm private)"
    ]
    if containment.in_memory:
        evidence.append(
            f"rebuilt in memory (a user namespace cannot overlay them): {', '.join(containment.in_memory)}; "
            "files directly in them were read-only to the job, what it made there stayed in memory"
        )
    evidence += [_change_line(w, base) for w in changed[:SHOWN]]
    if len(changed) > SHOWN:
        evidence.append(f"... and {len(changed) - SHOWN} more (all of them in --format json)")
    if containment.read_only:
        evidence.append(
            f"read-only to the job (the kernel refused a copy-on-write layer there): {', '.join(containment.read_only)}"
        )
    # a directory, not a file bound over a file (a container's /etc/hosts, which no script writes)
    sealed = [p for p in containment.read_only if os.path.isdir(p)]
    if sealed and not containment.uncontained:
        return CheckResult(
            IO_SANDBOX,
            Status.WARN,
            f"{said} in the job's copy-on-write layer, discarded: none reached your disk; but "
            f"{', '.join(sealed)} {'was' if len(sealed) == 1 else 'were'} read-only to the job, so a write there fails",
            evidence,
            fix=READ_ONLY_FIX,
            data=data,
        )
    if containment.uncontained:
        evidence.append(f"not contained (neither overlaid nor made read-only): {', '.join(containment.uncontained)}")
        return CheckResult(
            IO_SANDBOX,
            Status.WARN,
            f"contained in part: {said} under the copy-on-write layer; writes to "
            f"{', '.join(containment.uncontained)} were not contained",
            evidence,
            data=data,
        )
    return CheckResult(
        IO_SANDBOX,
        Status.PASS,
        f"{said} in the job's copy-on-write layer, discarded: none reached your disk",
        evidence,
        data=data,
    )


def check_leftovers(outcome: Outcome | None, records: dict[int, RankRecord]) -> CheckResult:
    if outcome is None:
        return CheckResult(RUN_LEFTOVER, Status.SKIP, f"needs the sandbox's process namespace (see {IO_SANDBOX})")
    if outcome.stopped_by is not None or outcome.returncode is None:
        return CheckResult(RUN_LEFTOVER, Status.SKIP, "the job was stopped before its end")
    if not outcome.processes_visible:
        return CheckResult(
            RUN_LEFTOVER,
            Status.SKIP,
            "the job's processes could not be listed (no /proc of its own); every one was killed at the end",
        )
    data = {"processes": [{"pid": p.pid, "command": p.command} for p in outcome.leftovers]}
    if not outcome.leftovers:
        return CheckResult(RUN_LEFTOVER, Status.PASS, "no process of the job outlived torchrun", data=data)
    evidence = [f"pid {p.pid}: {p.command[:160]}" for p in outcome.leftovers]
    n = len(outcome.leftovers)
    fix = "join or terminate the processes the script starts (daemons, new sessions, spawned workers) before it exits"
    if records and all(r.status == "completed" for r in records.values()):
        return CheckResult(
            RUN_LEFTOVER,
            Status.FAIL,
            f"{n} process(es) still running after every rank's script had ended; ddplint killed them",
            evidence,
            fix=fix,
            data=data,
        )
    return CheckResult(
        RUN_LEFTOVER,
        Status.WARN,
        f"{n} process(es) still running when the audit had stopped the script (it may "
        "stop them after the epochs the audit cut short); ddplint killed them",
        evidence,
        fix=fix,
        data=data,
    )
