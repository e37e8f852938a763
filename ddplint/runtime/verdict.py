"""The verdict of one runtime check: plain data shared by host checks, rank checks and reports."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ddplint.runtime.registry import CHECKS


class Status(str, Enum):
    """A check's verdict. Declaration order is the order of the JSON report's `counts`;
    `severity` is the one order of how bad a status is: SKIP < PASS < INFO < WARN < FAIL."""

    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    INFO = "INFO"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {Status.SKIP: 0, Status.PASS: 1, Status.INFO: 2, Status.WARN: 3, Status.FAIL: 4}
BY_SEVERITY = tuple(sorted(Status, key=lambda s: -s.severity))  # FAIL, WARN, INFO, PASS, SKIP


def worst(statuses: Iterable[Status], default: Status = Status.SKIP) -> Status:
    """The most severe of `statuses`; `default` when there is none."""
    return max(statuses, key=lambda s: s.severity, default=default)


@dataclass
class CheckResult:
    check: str  # a registered id (ddplint.runtime.registry), e.g. DATA_DISJOINT
    status: Status
    summary: str  # one line
    evidence: list[str] = field(default_factory=list)  # lines shown under the summary
    fix: str | None = None  # one-line fix, when there is one
    rule: str | None = None  # the static rule it maps to, e.g. "DDP201"
    data: dict = field(default_factory=dict)  # machine-readable details for --format json

    def __post_init__(self) -> None:
        spec = CHECKS.get(self.check)
        if spec is None:
            raise ValueError(f"{self.check!r} is not a check of ddplint.runtime.registry")
        if self.rule is not None and self.rule not in spec.rules:
            raise ValueError(f"{self.check} is not linked to {self.rule} in ddplint.runtime.registry")

    def to_json(self) -> dict:
        out: dict[str, Any] = {"check": self.check, "status": self.status.value, "summary": self.summary}
        if self.evidence:
            out["evidence"] = self.evidence
        if self.fix:
            out["fix"] = self.fix
        if self.rule:
            out["rule"] = self.rule
        if self.data:
            out["data"] = self.data
        return out
