"""Questions about the paths through a function: does one event happen on every path to another,
and can a branch run at all.

Each call site and binding carries `blocks`, the branch bodies around it (an `if` or `else`
body, a loop body, an `except` handler, the body of `with torch.cuda.device(i):`), outermost
first. An event dominates a later one in the same function when its blocks are a prefix of
the later one's: it ran on every path that got there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import libcst as cst

from ddplint.lint.facts import CallSite, ModuleFacts
from ddplint.lint.names import arg, int_value, reference
from ddplint.lint.roles import PER_NODE, RANKS


class Event(Protocol):
    @property
    def function(self) -> str: ...
    @property
    def order(self) -> int: ...
    @property
    def blocks(self) -> tuple[int, ...]: ...


def dominates(first: Event, later: Event) -> bool:
    """`first` runs on every path from the start of its function to `later`."""
    if first.function != later.function or later.blocks[: len(first.blocks)] != first.blocks:
        return False
    if first.order < later.order:
        return True
    # events are numbered outer call first, but a call in another's receiver or arguments runs
    # before it: `Trainer(cfg).fit()` runs __init__ before fit
    return id(getattr(later, "node", None)) in getattr(first, "within_calls", ())


def exclusive(a: CallSite, b: CallSite) -> bool:
    """The two sites sit on opposite sides of the same test (`if args.distributed:` ... `else:`,
    or `if args.eval: ...; return` and what follows it): no run reaches both."""
    return any(
        ca.negated != cb.negated and (ca.test is cb.test or ca.test.deep_equals(cb.test))
        for ca in a.conditions
        for cb in b.conditions
    )


def joined(events: Sequence[Event], later: Event, facts: ModuleFacts) -> bool:
    """The events together run on every path to `later`: one of them dominates it, or an if/else
    before it has one on every path through each of its arms (`if a: set_device(i) else:
    set_device(j)`, elif chains and nested ones included)."""
    if any(dominates(e, later) for e in events):
        return True
    before = [e for e in events if e.function == later.function and e.order < later.order]
    for e in before:
        k = next((i for i, block in enumerate(e.blocks) if i >= len(later.blocks) or later.blocks[i] != block), None)
        if k is None or e.blocks[k] not in facts.arms:
            continue
        if _through_every_arm(before, e.blocks[:k], facts.arms[e.blocks[k]], facts):
            return True
    return False


def _through_every_arm(events: Sequence[Event], prefix: tuple[int, ...], arms: tuple[int, int], facts: ModuleFacts) -> bool:
    return all(_on_every_path(events, (*prefix, arm), facts) for arm in arms)


def _on_every_path(events: Sequence[Event], prefix: tuple[int, ...], facts: ModuleFacts) -> bool:
    """Every path through the block `prefix` ends in (reaches) one of the events."""
    depth = len(prefix)
    inside = [e for e in events if e.blocks[:depth] == prefix]
    if any(len(e.blocks) == depth for e in inside):
        return True
    inner_arms = {facts.arms[e.blocks[depth]] for e in inside if e.blocks[depth] in facts.arms}
    return any(_through_every_arm(inside, prefix, arms, facts) for arms in inner_arms)


def on_the_way_to_a_failure(facts: ModuleFacts, event: Event) -> bool:
    """Inside an `except` clause that ends by raising an error of its own: the run stops there
    (`except ImportError: create_default_local_file(); raise RuntimeError("set up local.py
    first")`). Not one that re-raises what it caught after saving (`torch.save(...); raise e`)."""
    return bool(facts.failing) and any(block in facts.failing for block in event.blocks)


def never_runs(facts: ModuleFacts, site: CallSite) -> bool:
    """Inside a branch that value flow rules out: `if args.gpu is None:` where `args.gpu` was set
    from the process's rank (`args.gpu = gpu` in an mp.spawn worker) and so is never None; or
    `if ... and not evaluate:` where `evaluate` is a function of the module, always true."""
    for condition in site.conditions:
        test = condition.test
        if not condition.negated and _always_false(facts, test, site):
            return True
        if condition.negated and _held_constant(facts, test, site, _true_constant):
            return True  # the `else:` of `if multi_gpu:` after `multi_gpu = True`
        if type(test) is not cst.Comparison or len(test.comparisons) != 1:
            continue
        target = test.comparisons[0]
        if not (type(target.comparator) is cst.Name and target.comparator.value == "None"):
            continue
        is_none = (
            type(target.operator) is cst.Is and not condition.negated or type(target.operator) is cst.IsNot and condition.negated
        )
        if (
            is_none
            and facts.role_of(test.left, site.function) in RANKS | PER_NODE
            and not _given_directly(facts, test.left, site)
        ):
            return True
    return False


def _given_directly(facts: ModuleFacts, expr: cst.BaseExpression, site: CallSite) -> bool:
    """The rank value comes from a parameter of the site's function that a direct call in the
    module fills with something that is no rank: `main_worker(args.gpu, ...)` beside
    `mp.spawn(main_worker, ...)` runs the worker with the option's value, None unless given."""
    info = facts.functions.get(site.function)
    name = reference(expr)
    if info is None or name is None:
        return False
    params = [p.name.value for p in info.node.params.params]
    sources = {name} & set(params) or {
        b.value.value
        for b in facts.assigned(name)
        if b.function == site.function and type(b.value) is cst.Name and b.value.value in params
    }
    for source in sources:
        for call in facts.calls:
            if call.name != site.function:
                continue
            given = arg(call.node, params.index(source), source)
            if given is None or type(given) is cst.Integer:
                continue
            # no rank, or the very value the worker makes a rank of (its role is this binding's)
            if reference(given) == name or facts.role_of(given, call.function) is None:
                return True
    return False


def _always_false(facts: ModuleFacts, test: cst.BaseExpression, site: CallSite) -> bool:
    """`not f` for a function `f` of the module that nothing rebinds, a false constant (`if 0 and
    args.distributed:`, `if False:`), or a name whose every binding that reaches the site is one
    (`args.distribution = False` after the parse, then `if args.distribution:`; `path = None`,
    then `if path is not None:`), alone or in an `and`."""
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _always_false(facts, test.left, site) or _always_false(facts, test.right, site)
    if _held_constant(facts, test, site, _false_constant):
        return True
    if (  # `ckpt_path = None`, then `if ckpt_path is not None:`
        type(test) is cst.Comparison
        and len(test.comparisons) == 1
        and _none_constant(test.comparisons[0].comparator)
        and type(test.comparisons[0].operator) in (cst.IsNot, cst.NotEqual)
    ):
        return _held_constant(facts, test.left, site, _none_constant)
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not and type(test.expression) is cst.Name:
        name = test.expression.value
        return name in facts.functions and not facts.assigned(name)
    return False


def _held_constant(
    facts: ModuleFacts, test: cst.BaseExpression, site: CallSite, constant: Callable[[cst.BaseExpression], bool]
) -> bool:
    """The test is such a constant, or a name whose every binding that reaches the site is one, one
    of them on every path to it: nothing else (an option's parse) gets through (`multi_gpu = True`,
    then `if multi_gpu:`)."""
    if constant(test):
        return True
    name = reference(test) if type(test) in (cst.Name, cst.Attribute) else None
    if name is None or name in facts.functions:
        return False
    reaching = facts.reaching(name, site.function, site.order, site.blocks)
    return any(dominates(a, site) for a in reaching) and all(not a.element and constant(a.value) for a in reaching)


def _true_constant(expr: cst.BaseExpression) -> bool:
    number = int_value(expr) if type(expr) is cst.Integer else None
    return type(expr) is cst.Name and expr.value == "True" or number is not None and number != 0


def literal_truth(expr: cst.BaseExpression) -> bool | None:
    """The truth of a constant (`True`, `0`, `None`), None where the expression is none."""
    return True if _true_constant(expr) else False if _false_constant(expr) else None


def _none_constant(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Name and expr.value == "None"


def _false_constant(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Integer and int_value(expr) == 0 or type(expr) is cst.Name and expr.value in ("False", "None")
