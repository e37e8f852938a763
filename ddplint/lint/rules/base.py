"""What a rule is: an id, a name, a level (its severity), and a check over a module's facts."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from ddplint.diagnostics import Severity

if TYPE_CHECKING:
    from ddplint.lint.context import LintContext


@dataclass(frozen=True)
class Replace:
    """Put `replacement` where `node` is (an expression or an argument list, on its own lines)."""

    node: cst.CSTNode
    replacement: cst.CSTNode


@dataclass(frozen=True)
class InsertBefore:
    """Insert `statement` just above `before` (above its leading comments), at its indentation."""

    before: cst.SimpleStatementLine | cst.BaseCompoundStatement
    statement: cst.BaseStatement


@dataclass(frozen=True)
class Remedy:
    """A fix a rule offers; `safe=False` for one that may change behaviour (`--unsafe-fixes`)."""

    description: str
    edit: Replace | InsertBefore
    safe: bool = True


@dataclass(frozen=True)
class Inside:
    """The node inside a project helper (in another module) that a reported call reaches, or the
    call of the linted module's own function that reaches a reported write."""

    path: Path
    node: cst.CSTNode
    message: str


@dataclass(frozen=True)
class Finding:
    """A rule's report about one node; the engine turns it into a positioned Diagnostic."""

    node: cst.CSTNode
    message: str
    fix: Remedy | None = None
    inside: tuple[Inside, ...] = ()  # for a call of a helper: where the mistake is in it


class Rule:
    """Base of the lint rules: a code, a level, and check() yielding a Finding per mistake."""

    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case of the class name: MissingSetEpoch -> "missing-set-epoch"
    # Every rule states its level; the level decides whether the rule is on by default.
    severity: ClassVar[Severity]
    tags: ClassVar[tuple[str, ...]] = ("distributed", "correctness")
    precision: ClassVar[str] = "high"  # SARIF precision: very-high | high | medium | low
    # Rules stay quiet outside distributed scripts and where a framework owns distribution.
    needs_distributed: ClassVar[bool] = True
    # Rules about data-parallel replicas (devices, samplers) also stay quiet in RPC-only scripts.
    data_parallel: ClassVar[bool] = False
    # Frameworks that leave this rule's concern to the script: the Hugging Face Trainer owns
    # devices, samplers and its own saving, not what the script writes around trainer.train().
    beside_frameworks: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        words = re.findall(r"[A-Z][a-z0-9]*", cls.__name__.removesuffix("Rule"))
        cls.name = "-".join(word.lower() for word in words)

    @classmethod
    def applies(cls, ctx: LintContext) -> bool:
        """Whether the rule has anything to say about this module at all."""
        if cls.needs_distributed:
            framework = ctx.framework
            if not ctx.is_distributed or framework is not None and framework not in cls.beside_frameworks:
                return False
        return not (cls.data_parallel and ctx.facts.rpc_only)

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        raise NotImplementedError
