"""env.stale: torchrun agents or ranks of an earlier job that still run or hold GPU memory."""

from __future__ import annotations

import os
import re

from ddplint.runtime.checks import procs
from ddplint.runtime.checks.common import mib, plural
from ddplint.runtime.nvml import Machine
from ddplint.runtime.registry import ENV_STALE
from ddplint.runtime.verdict import CheckResult, Status


def _names_port(argv: list[str], port: int) -> bool:
    """--master-port P, --master_port=P or --rdzv-endpoint HOST:P."""
    return re.search(rf"(?:port[= ]|:){port}\b", " ".join(argv)) is not None


def find_stale(port: int | None = None, nnodes: int = 1) -> list[tuple[procs.Proc, str]]:
    """(process, "torchrun agent" | "rank N") of distributed jobs other than this one.

    On a multi-node job started on one host (two ddplint processes as two nodes), the agent of
    the other node names the same rendezvous port: it belongs to this job, not an earlier one.
    """
    all_procs = procs.processes()
    me = os.getpid()
    mine = procs.ancestors(me) | procs.descendants(me, all_procs)
    peers: set[int] = set()
    if nnodes > 1 and port is not None:
        for p in all_procs:
            if procs.is_agent(p.argv) and _names_port(p.argv, port):
                peers |= {p.pid} | procs.descendants(p.pid, all_procs)
    out = []
    for p in all_procs:
        if p.pid in mine or p.pid in peers:
            continue
        if procs.is_agent(p.argv):
            out.append((p, "torchrun agent"))
            continue
        env = procs.environ_of(p.pid)
        if env and "TORCHELASTIC_RUN_ID" in env and "RANK" in env:
            out.append((p, f"rank {env['RANK']}"))
    return out


def stale_check(machine: Machine | None, job: list[int], port: int | None, nnodes: int = 1) -> CheckResult:
    stale = find_stale(port, nnodes)
    by_pid = {p.pid: (p, role) for p, role in stale}
    evidence = [f"pid {p.pid} ({role}, running {procs.age_text(p.age_s)}): {p.command[:200]}" for p, role in stale]
    holding = []
    if machine is not None:
        for i in job:
            for gp in machine.gpus[i].processes:
                if gp.pid in by_pid:
                    holding.append(f"pid {gp.pid} ({by_pid[gp.pid][1]}) holds {mib(gp.used_bytes)} on {machine.gpus[i].label}")
    evidence += holding
    data = {"processes": [{"pid": p.pid, "role": role, "command": p.command, "age_s": p.age_s} for p, role in stale]}
    if not stale:
        return CheckResult(ENV_STALE, Status.PASS, "no other torchrun agent or rank is running", data=data)
    agents = [p.pid for p, role in stale if role == "torchrun agent"]
    targets = agents or [p.pid for p, _ in stale]
    fix = f"if they are left over from an earlier run: kill {' '.join(map(str, targets))}" + (
        " (stopping an agent stops its ranks)" if agents else ""
    )
    if holding:
        return CheckResult(
            ENV_STALE,
            Status.FAIL,
            f"processes of an earlier job hold memory on this job's GPUs: {'; '.join(holding)}",
            evidence,
            fix,
            data=data,
        )
    ranks = len(stale) - len(agents)
    return CheckResult(
        ENV_STALE,
        Status.WARN,
        f"{plural(len(agents), 'torchrun agent')} and {plural(ranks, 'rank')} of another job still running",
        evidence,
        fix,
        data=data,
    )
