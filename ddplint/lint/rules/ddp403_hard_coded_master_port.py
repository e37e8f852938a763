"""DDP403: MASTER_PORT or MASTER_ADDR hard-coded in a script that torchrun launches."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.lint.context import LintContext
from ddplint.lint.facts import SPAWN
from ddplint.lint.names import dotted, int_value, names_in, string_value
from ddplint.lint.rules.base import Finding, Rule

RENDEZVOUS = ("MASTER_PORT", "MASTER_ADDR")


class HardCodedMasterPort(Rule):
    code = "DDP403"

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        launched_by_torchrun = bool(facts.env_reads & {"LOCAL_RANK", "RANK"})
        if not launched_by_torchrun or facts.calls_to(*SPAWN):
            return
        for variable in RENDEZVOUS:
            write = facts.env_writes.get(variable)
            if write is None or not _literal(write.value) or any(_about_env(c.test, facts) for c in write.conditions):
                continue
            yield Finding(
                write.value,
                f"{variable} is hard-coded in a script that torchrun launches: it overrides the "
                "launcher's rendezvous and collides with other jobs on the node (address in use or "
                f"a hang); remove it and pass --master-port/--rdzv-endpoint to torchrun",
            )


def _literal(expr: cst.BaseExpression) -> bool:
    if string_value(expr) is not None or int_value(expr) is not None:
        return True
    if isinstance(expr, cst.Call) and dotted(expr.func) == "str" and expr.args:
        return _literal(expr.args[0].value)
    return False


def _about_env(test: cst.BaseExpression, facts) -> bool:
    """A condition that looks at the environment (`if "MASTER_PORT" not in os.environ:`)."""
    if any(facts.qualify(n) == "os.environ" or (facts.qualify(n) or "").startswith("os.environ.") for n in names_in(test)):
        return True
    return any(
        "MASTER" in (string_value(node) or "") or "SLURM" in (string_value(node) or "")
        for node in _strings(test)
    )


def _strings(node: cst.CSTNode):
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        yield node
    for child in node.children:
        yield from _strings(child)
