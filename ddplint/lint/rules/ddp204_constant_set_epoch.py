"""DDP204: set_epoch with a value that does not change from one epoch to the next."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import CallSite, ModuleFacts
from ddplint.lint.loaders import epoch_loop, epoch_loops, loaders_given
from ddplint.lint.names import is_constant, names_in
from ddplint.lint.rules.base import Finding, Rule


class ConstantSetEpoch(Rule):
    """Finds set_epoch called with a value that is the same in every epoch."""

    code = "DDP204"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        for site in facts.calls:
            if site.method != "set_epoch" or not site.node.args:
                continue
            value = site.node.args[0].value
            loops = [loop for loop in site.loops if epoch_loop(loop)]
            if loops and (is_constant(value) or _loop_invariant(facts, loops, value)) and not _reads_own_state(site, value):
                yield Finding(
                    value,
                    "set_epoch() gets a value that does not change from one epoch to the next: the "
                    "sampler repeats the same order every epoch; pass the epoch loop variable "
                    "(sampler.set_epoch(epoch))",
                )
            elif not site.loops and is_constant(value) and self._once_before_loop(facts, site):
                yield Finding(
                    value,
                    "set_epoch() is called once, before the epoch loop: every epoch repeats this "
                    "order; call sampler.set_epoch(epoch) at the start of each epoch instead",
                )

    @staticmethod
    def _once_before_loop(facts: ModuleFacts, site: CallSite) -> bool:
        """An epoch loop that reads the sampler's data follows in the same function, and no
        set_epoch on the same sampler runs inside one. A loop that never touches the sampler or
        a loader built on it (a search over one batch taken before it) repeats no order."""
        data = _data_names(facts, site)
        if not any(
            data & {n.split(".")[0] for n in names_in(loop.node)} for loop in epoch_loops(facts, site.function, site.order)
        ):
            return False
        return not any(
            other.method == "set_epoch" and other.name == site.name and any(epoch_loop(lp) for lp in other.loops)
            for other in facts.calls
        )


def _data_names(facts: ModuleFacts, site: CallSite) -> set[str]:
    """The names that reach the sampler's data: the head of its receiver (`loader` of
    `loader.sampler.set_epoch`), and the loaders built on it (`DataLoader(ds, sampler=sampler)`)."""
    receiver = site.name.rpartition(".")[0] if site.name else ""
    if not receiver:
        return set()
    return {name.split(".")[0] for name in (receiver, *loaders_given(facts, {receiver}))}


def _loop_invariant(facts: ModuleFacts, loops: list[cst.For | cst.While], value: cst.BaseExpression) -> bool:
    if any(type(n) is cst.Call for n in _walk(value)):
        return False
    used = names_in(value, keys=True)  # `self.progress["epoch"]`, bumped as "self.progress.epoch"
    changing: set[str] = set()
    for loop in loops:
        if type(loop) is cst.For:
            changing |= names_in(loop.target)
    changing |= {a.target for loop in loops for a in facts.by_loop.get(id(loop), [])}
    return not any(n in changing or n.split(".")[0] in changing for n in used)


def _reads_own_state(site: CallSite, value: cst.BaseExpression) -> bool:
    """The value reads the sampler's own state, which set_epoch itself moves on:
    `loaders["val"].sampler.set_epoch(loaders["val"].sampler.epoch + 1)`."""
    func = site.node.func
    receiver = func.value if type(func) is cst.Attribute else None
    return receiver is not None and any(type(n) is cst.Attribute and n.value.deep_equals(receiver) for n in _walk(value))


def _walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    yield node
    for child in node.children:
        yield from _walk(child)
