"""The runtime audit's report: one dict (the documented JSON, docs/runtime-json.md) and its text.

The text form is one line per check (STATUS, check, summary, "see DDPxxx"), then the
evidence and the fix indented under it, then a count of statuses. The dict is built once and
both renderers read it, so the two formats never disagree.
"""

from __future__ import annotations

import json
from collections import Counter

import ddplint
from ddplint.runtime.sites import short
from ddplint.runtime.verdict import BY_SEVERITY, CheckResult, Status

SCHEMA = "ddplint.runtime/1"


def exit_code(checks: list[CheckResult]) -> int:
    return 1 if any(c.status is Status.FAIL for c in checks) else 0


def build(
    checks: list[CheckResult],
    *,
    script: str | None,
    script_args: tuple[str, ...],
    launch: dict,
    elapsed_s: float,
    ranks: list[dict],
    loaders: list[dict],
    writes: list[dict],
) -> dict:
    counts = Counter(c.status.value for c in checks)
    return {
        "schema": SCHEMA,
        "ddplint_version": ddplint.__version__,
        "script": script,
        "script_args": list(script_args),
        "launch": launch,
        "elapsed_s": round(elapsed_s, 3),
        "exit_code": exit_code(checks),
        "counts": {s.value: counts.get(s.value, 0) for s in Status},
        "checks": [c.to_json() for c in checks],
        "ranks": ranks,
        "loaders": loaders,
        "writes": writes,
    }


def to_json(report: dict) -> str:
    return json.dumps(report, indent=2, default=str) + "\n"


def _with_details(check: dict) -> bool:
    """WARN and worse: shown first, with evidence and fix."""
    return Status(check["status"]).severity >= Status.WARN.severity


def _text_order(check: dict) -> int:
    """FAIL, then WARN, then everything else in check order (sorted() is stable)."""
    return -Status(check["status"]).severity if _with_details(check) else 0


def to_text(report: dict, quiet: bool = False) -> str:
    """FAIL and WARN first with their evidence and fix, then the rest one line each;
    `quiet`: only what did not PASS."""
    launch = report["launch"]
    nodes = launch["nnodes"]
    where = f"{launch['world_size']} ranks{f' on {nodes} nodes' if nodes > 1 else ''}, {launch['backend']}" + (
        ", CUDA mapped to the CPU" if launch.get("cuda_on_cpu") else ""
    )
    if report["script"] is None:
        head = f"ddplint machine preflight  ({where}, {report['elapsed_s']:.1f} s)"
    else:
        head = (
            f"ddplint runtime audit: {short(report['script'])}  ({where}, {launch['epochs']} epochs x "
            f"{launch['steps']} steps, {report['elapsed_s']:.1f} s)"
        )
    lines = [head, ""]
    width = max([len(c["check"]) for c in report["checks"]] + [12])
    shown = sorted(report["checks"], key=_text_order)
    for c in shown:
        if quiet and c["status"] == "PASS":
            continue
        see = f" (see {c['rule']})" if c.get("rule") else ""
        lines.append(f"{c['status']:<5} {c['check']:<{width}}  {c['summary']}{see}")
        if not _with_details(c):
            continue  # the rest compactly: the JSON report keeps their evidence
        pad = " " * (6 + width + 2)
        for ev in c.get("evidence", []):
            lines.append(pad + ev)
        if c.get("fix"):
            lines.append(pad + "fix: " + c["fix"])
    counts = report["counts"]
    lines += ["", ", ".join(f"{counts[s.value]} {s.value}" for s in BY_SEVERITY if counts[s.value]) or "no checks ran"]
    return "\n".join(lines) + "\n"
