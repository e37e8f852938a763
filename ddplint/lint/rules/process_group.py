"""DDP402-DDP403: the life of the process group, from rendezvous to teardown."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import INIT_PG, SPAWN
from ddplint.lint.names import dotted, int_value, names_in, string_value
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect

RENDEZVOUS = ("MASTER_PORT", "MASTER_ADDR")


class NoDestroyProcessGroup(Rule):
    code = "DDP402"
    name = "missing-destroy-process-group"
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        inits = [s for s in ctx.summaries.sites_with(Effect.INIT_GROUP) if not self._through_other_script(ctx, s)]
        if not inits or ctx.summaries.sites_with(Effect.DESTROYS_GROUP):
            return
        if not facts.is_script and not any(s.function == "" for s in inits):
            return  # a library module: whoever calls it decides when to tear down
        direct = [s for s in inits if s.name == INIT_PG] or inits
        site = min(direct, key=lambda s: s.order)
        yield Finding(
            site.node,
            "the process group is never destroyed: at exit NCCL resources leak, PyTorch warns and "
            "ranks can hang in teardown; call dist.destroy_process_group() at the end of training",
        )

    @staticmethod
    def _through_other_script(ctx: LintContext, site) -> bool:
        """`detection.main(args)` from a launcher wrapper: main.py is a script and answers for itself."""
        resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
        return resolved is not None and resolved[0] is not ctx.facts and resolved[0].is_script


class HardCodedRendezvous(Rule):
    code = "DDP403"
    name = "hard-coded-master-port"

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
