"""What a rule is: an id, a name, a severity, and a check over a module's facts."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from ddplint.diagnostics import Severity

if TYPE_CHECKING:
    from ddplint.lint.context import LintContext


@dataclass(frozen=True)
class Finding:
    """A rule's report about one node; the engine turns it into a positioned Diagnostic."""

    node: cst.CSTNode
    message: str
    replacement: cst.CSTNode | None = None  # a safe fix: the node to put in `node`'s place
    fix_description: str = ""


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity] = Severity.ERROR
    tags: ClassVar[tuple[str, ...]] = ("distributed", "correctness")
    precision: ClassVar[str] = "high"  # SARIF precision: very-high | high | medium | low
    # Rules stay quiet outside distributed scripts and where a framework owns distribution.
    needs_distributed: ClassVar[bool] = True
    # Rules about data-parallel replicas (devices, samplers) also stay quiet in RPC-only scripts.
    data_parallel: ClassVar[bool] = False

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        raise NotImplementedError
