"""Which expression holds this process's local rank at a point of a script: what a fix may put
where a GPU index is hard-coded.

Only names that certainly reach the point qualify: a binding of the same function on every
path to it (or a module global it does not shadow), an attribute `__init__` sets on `self`, a
parameter the launcher fills with the local rank, or an argparse option of the parsed
arguments in scope. A binding must be given a value that holds the local rank
(`int(os.environ["LOCAL_RANK"])`, `rank % torch.cuda.device_count()`, `args.local_rank`):
`local_rank = -1` is a name, not a local rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from ddplint.lint.context import LintContext
from ddplint.lint.devices import parameter_names, parsed_arguments
from ddplint.lint.facts import Assignment, spawn_targets
from ddplint.lint.paths import Event, dominates
from ddplint.lint.roles import Role


@dataclass(frozen=True)
class LocalRank:
    code: str  # as it is written at that point: "local_rank", "self.local_rank", "args.local_rank"
    is_int: bool  # known to be an int; otherwise it may be the text of an environment variable


def local_rank_at(ctx: LintContext, at: Event) -> LocalRank | None:
    return _bound(ctx, at) or _parameter(ctx, at) or _option(ctx, at)


def _bound(ctx: LintContext, at: Event) -> LocalRank | None:
    facts = ctx.facts
    visible = [
        a for a in facts.assignments
        if not a.element and _holds(ctx, a) and (
            dominates(a, at)
            or a.function == "" and at.function != "" and "." not in a.target
            or _set_by_init(a, at)
        )
    ]
    for a in sorted(visible, key=lambda a: (a.function == at.function, a.order), reverse=True):
        reaching = facts.reaching(a.target, at.function, at.order, at.blocks)
        if a.target.startswith("self.") or reaching and all(_holds(ctx, b) for b in reaching):
            return LocalRank(a.target, _integer(ctx, a.value))
    return None


def _holds(ctx: LintContext, a: Assignment) -> bool:
    return ctx.facts.role_of(a.value, a.function) is Role.LOCAL_RANK


def _set_by_init(a: Assignment, at: Event) -> bool:
    """`self.local_rank = ...` in `__init__`, read in another method of the same class."""
    head, _, attribute = a.target.partition(".")
    cls, _, method = a.function.rpartition(".")
    return (head == "self" and "." not in attribute and method == "__init__"
            and at.function.rpartition(".")[0] == cls and at.function != a.function)


def _integer(ctx: LintContext, value: cst.BaseExpression) -> bool:
    """`int(...)`, `rank % n`, `dist.get_node_local_rank()`: an int for certain."""
    if isinstance(value, cst.Call):
        return ctx.facts.callee(value) in {"int", "torch.distributed.get_node_local_rank"}
    return isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Modulo)


def _parameter(ctx: LintContext, at: Event) -> LocalRank | None:
    """The first parameter of a function that torch.multiprocessing.spawn starts: the process index."""
    facts = ctx.facts
    info = facts.functions.get(at.function)
    if info is None or at.function not in spawn_targets(facts) or not info.params:
        return None
    first = info.params[0]
    if facts.roles.get((at.function, first)) is not Role.LOCAL_RANK:
        return None
    if facts.reaching(first, at.function, at.order, at.blocks):
        return None  # rebound before this point
    return LocalRank(first, True)


def _option(ctx: LintContext, at: Event) -> LocalRank | None:
    """`args.local_rank` where `args` holds the parsed command line and `--local_rank` defaults to
    the environment's LOCAL_RANK."""
    facts = ctx.facts
    # torchrun passes no --local_rank: the option holds the local rank only if its default reads it
    options = [dest for dest, default in facts.options.items()
               if facts.role_of_name(dest, "") is Role.LOCAL_RANK and facts.role_of(default, "") is Role.LOCAL_RANK]
    if not options:
        return None
    info = facts.functions.get(at.function)
    heads = {a.target for a in facts.assignments
             if "." not in a.target and a.function in {"", at.function} and isinstance(a.value, cst.Call)}
    if info is not None:
        heads |= parameter_names(info.node)
    for head in sorted(heads):
        if parsed_arguments(ctx, head, at):
            return LocalRank(f"{head}.{options[0]}", False)
    return None

