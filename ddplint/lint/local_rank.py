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
from ddplint.lint.devices import (
    holds_parsed_arguments,
    parameter_names,
    parsed_arguments,
)
from ddplint.lint.facts import Assignment, process_index_parameter, spawn_targets
from ddplint.lint.paths import Event, dominates
from ddplint.lint.roles import Role, last_part


@dataclass(frozen=True)
class LocalRank:
    code: str  # as it is written at that point: "local_rank", "self.local_rank", "args.local_rank"
    is_int: bool  # known to be an int; otherwise it may be the text of an environment variable


def local_rank_at(ctx: LintContext, at: Event) -> LocalRank | None:
    if at.function and at.function not in ctx.facts.functions:
        return None  # a class body: its names are not visible in its comprehensions and lambdas
    holder = _bound(ctx, at) or _parameter(ctx, at) or _option(ctx, at)
    if holder is not None and holder.code.partition(".")[0] in getattr(at, "inner_names", frozenset()):
        return None  # a lambda parameter or comprehension variable of that name is in the way
    return holder


def _bound(ctx: LintContext, at: Event) -> LocalRank | None:
    facts = ctx.facts
    holding = [a for a in facts.assignments if not a.element and _holds(ctx, a)]
    for a in sorted(holding, key=lambda a: (a.function == at.function, a.order), reverse=True):
        if a.target.startswith("self."):
            if _set_by_init(ctx, a, at):
                return LocalRank(a.target, _integer(ctx, a.value))
        elif "." not in a.target and _available(ctx, a, at) and not _rebound_in_loop(ctx, a.target, at):
            reaching = facts.reaching(a.target, at.function, at.order, at.blocks)
            if all(_holds(ctx, b) for b in reaching):
                return LocalRank(a.target, _integer(ctx, a.value))
    return None


def _available(ctx: LintContext, binding: Assignment, at: Event) -> bool:
    """`binding` of a plain name has run, and holds, wherever `at` runs: it dominates `at` in the
    same function, or it is a module global that the function does not shadow and that is bound
    before every call of the function."""
    if dominates(binding, at):
        return True
    if binding.function != "" or at.function == "":
        return False
    if _shadowed(ctx, binding.target, at.function):
        return False
    return _called_after(ctx, binding, at.function, depth=4)


def _shadowed(ctx: LintContext, name: str, function: str) -> bool:
    """The function (or one around it) binds `name` itself: a parameter or any assignment."""
    facts = ctx.facts
    scopes = [function]
    while "." in scopes[-1]:
        scopes.append(scopes[-1].rpartition(".")[0])
    for scope in scopes:
        info = facts.functions.get(scope)
        if info is not None and name in info.params:
            return True
    return any(a.function in scopes for a in facts.assigned(name))


def _called_after(ctx: LintContext, binding: Assignment, function: str, depth: int) -> bool:
    """Every call of `function` in this module comes after `binding` (and there is one)."""
    callers = ctx.guards.callers(ctx.facts).get(function, [])
    if not callers or depth == 0:
        return False
    return all(dominates(binding, c) if c.function == "" else _called_after(ctx, binding, c.function, depth - 1) for c in callers)


def _rebound_in_loop(ctx: LintContext, name: str, at: Event) -> bool:
    """A later binding in a loop around `at` gives the next iteration another value."""
    loops = getattr(at, "loops", ())
    return any(
        a.function == at.function and a.order > at.order and any(loop in loops for loop in a.loops)
        for a in ctx.facts.assigned(name)
    )


def _holds(ctx: LintContext, a: Assignment) -> bool:
    return ctx.facts.role_of(a.value, a.function) is Role.LOCAL_RANK


def _set_by_init(ctx: LintContext, a: Assignment, at: Event) -> bool:
    """`self.local_rank = ...` in `__init__`, read in another method of the same class that takes
    `self` and that `__init__` itself does not call (it could run before the assignment)."""
    head, _, attribute = a.target.partition(".")
    cls, _, method = a.function.rpartition(".")
    if head != "self" or "." in attribute or method != "__init__" or a.blocks or a.conditions:
        return False
    owner, _, name = at.function.rpartition(".")
    info = ctx.facts.functions.get(at.function)
    if owner != cls or info is None or not info.params or info.params[0] != "self":
        return False
    if any(last_part(d) in {"staticmethod", "classmethod"} for d in info.decorators):
        return False
    return not any(c.method == name and (c.name or "").startswith("self.") for c in ctx.facts.calls_in(a.function))


def _integer(ctx: LintContext, value: cst.BaseExpression) -> bool:
    """`int(...)`, `rank % n`, `dist.get_node_local_rank()`: an int for certain."""
    if type(value) is cst.Call:
        return ctx.facts.callee(value) in {"int", "torch.distributed.get_node_local_rank"}
    return type(value) is cst.BinaryOperation and type(value.operator) is cst.Modulo


def _parameter(ctx: LintContext, at: Event) -> LocalRank | None:
    """The first parameter of a function that torch.multiprocessing.spawn starts: the process index."""
    facts = ctx.facts
    first = process_index_parameter(facts, at.function) if at.function in spawn_targets(facts) else None
    if first is None:
        return None
    if facts.roles.get((at.function, first)) is not Role.LOCAL_RANK:
        return None
    if facts.reaching(first, at.function, at.order, at.blocks):
        return None  # rebound before this point
    return LocalRank(first, True)


def _option(ctx: LintContext, at: Event) -> LocalRank | None:
    """`args.local_rank` where `args` holds the parsed command line wherever `at` runs and
    `--local_rank` defaults to the environment's LOCAL_RANK (torchrun passes no --local_rank)."""
    facts = ctx.facts
    options = [
        dest
        for dest, default in facts.options.items()
        if facts.role_of_name(dest, "") is Role.LOCAL_RANK and facts.role_of(default, "") is Role.LOCAL_RANK
    ]
    if not options:
        return None
    info = facts.functions.get(at.function)
    parameters = parameter_names(info.node) if info is not None else set()
    for head in sorted(parameters):
        if parsed_arguments(ctx, head, at):  # every call passes the parsed arguments
            return LocalRank(f"{head}.{options[0]}", False)
    for a in facts.assignments:
        if (
            "." not in a.target
            and a.target not in parameters
            and type(a.value) is cst.Call
            and holds_parsed_arguments(ctx, a.value)
            and _available(ctx, a, at)
        ):
            return LocalRank(f"{a.target}.{options[0]}", False)
    return None
