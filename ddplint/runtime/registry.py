"""Every check of the runtime audit, once: its id, when it runs, the static rules it links to,
and the page that documents it.

A `CheckResult` must name a check registered here (verdict.py validates it), and the code
names checks through the constants below, never by a string literal of its own.
tests/test_runtime_registry.py ties this table to the check tables of docs/runtime-audit.md
and docs/runtime-checks.md and to the per-check `data` of docs/runtime-json.md.

This module imports nothing but the standard library: the launcher and the static path may
import it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Phase = Literal["host", "rank", "data", "io", "perf", "run"]
AUDIT_DOC = "docs/runtime-audit.md"
CHECKS_DOC = "docs/runtime-checks.md"


@dataclass(frozen=True)
class CheckSpec:
    id: str  # "group.name", e.g. "data.disjoint"
    phase: Phase  # host: the launcher, before torchrun; rank: facts from every rank, judged after the
    # merge; data, io, perf: the probe's records of the script; run: how the run itself went
    doc: str  # the page whose check table documents it (AUDIT_DOC or CHECKS_DOC)
    rules: tuple[str, ...] = ()  # the static rules its results may name, the usual one first

    @property
    def rule(self) -> str | None:
        """The static rule the check is linked to, or None."""
        return self.rules[0] if self.rules else None


CHECKS: dict[str, CheckSpec] = {}


def _check(id: str, phase: Phase, doc: str, *rules: str) -> str:
    assert id not in CHECKS, id
    CHECKS[id] = CheckSpec(id, phase, doc, rules)
    return id


def ids(phase: Phase) -> tuple[str, ...]:
    """The ids of one phase, in registration order (the report's order within the phase)."""
    return tuple(spec.id for spec in CHECKS.values() if spec.phase == phase)


# -- host checks (checks/host.py), before torchrun starts ----------------------------------
GPU_INVENTORY = _check("gpu.inventory", "host", CHECKS_DOC)
GPU_TOPOLOGY = _check("gpu.topology", "host", CHECKS_DOC)
GPU_HEALTH = _check("gpu.health", "host", CHECKS_DOC)
STACK_NVML = _check("stack.nvml", "host", CHECKS_DOC)
ENV_PORT = _check("env.port", "host", CHECKS_DOC)
ENV_STALE = _check("env.stale", "host", CHECKS_DOC)
ENV_LAUNCH = _check("env.launch", "host", CHECKS_DOC)
NET_INTERCONNECT = _check("net.interconnect", "host", CHECKS_DOC)
HOST_CHECKS = _check("host.checks", "host", CHECKS_DOC)  # the host checks raised

# -- rank checks (checks/rank.py), over every rank's record ---------------------------------
STACK_VERSIONS = _check("stack.versions", "rank", CHECKS_DOC)
STACK_CONSISTENT = _check("stack.consistent", "rank", CHECKS_DOC)
ENV_RANKS = _check("env.ranks", "rank", CHECKS_DOC)
BIND_DISTINCT = _check("bind.distinct", "rank", CHECKS_DOC, "DDP101")
COMM_ALLREDUCE = _check("comm.allreduce", "rank", CHECKS_DOC)
COMM_BANDWIDTH = _check("comm.bandwidth", "rank", CHECKS_DOC)
MEM_FIT = _check("mem.fit", "rank", CHECKS_DOC)
MEM_PEAK = _check("mem.peak", "rank", CHECKS_DOC)
RANK_CHECKS = _check("rank.checks", "rank", CHECKS_DOC)  # the rank checks raised

# -- the data and I/O audit (checks/data.py, writers.py, perf.py, restart.py, containment.py) -
DATA_DISJOINT = _check("data.disjoint", "data", AUDIT_DOC, "DDP201")
DATA_DUPLICATES = _check("data.duplicates", "data", AUDIT_DOC)
DATA_COVERAGE = _check("data.coverage", "data", AUDIT_DOC)
DATA_CONTENT = _check("data.content", "data", AUDIT_DOC, "DDP201")
DATA_SET_EPOCH = _check("data.set_epoch", "data", AUDIT_DOC, "DDP202", "DDP204")
IO_SINGLE_WRITER = _check("io.single_writer", "io", AUDIT_DOC, "DDP301", "DDP302")
IO_SANDBOX = _check("io.sandbox", "io", AUDIT_DOC)
CKPT_RESUME = _check("ckpt.resume", "perf", AUDIT_DOC)
CKPT_RESTART = _check("ckpt.restart", "perf", AUDIT_DOC)
PERF_STEPS = _check("perf.steps", "perf", AUDIT_DOC)
PERF_SCALING = _check("perf.scaling", "perf", AUDIT_DOC)

# -- the run itself (checks/run.py, containment.py) -------------------------------------
RUN_REACHED = _check("run.reached", "run", AUDIT_DOC)
RUN_FAILURE = _check("run.failure", "run", AUDIT_DOC)
RUN_HANG = _check("run.hang", "run", AUDIT_DOC, "DDP401")
RUN_LEFTOVER = _check("run.leftover", "run", AUDIT_DOC)
