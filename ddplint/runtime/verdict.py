"""The verdict of one runtime check: plain data shared by host checks, rank checks and reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASS = "PASS"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"
    INFO = "INFO"


@dataclass
class CheckResult:
    check: str  # e.g. "data.disjoint", "gpu.inventory"
    status: Status
    summary: str  # one line
    evidence: list[str] = field(default_factory=list)  # lines shown under the summary
    fix: str | None = None  # one-line fix, when there is one
    rule: str | None = None  # the static rule it maps to, e.g. "DDP201"
    data: dict = field(default_factory=dict)  # machine-readable details for --format json

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
