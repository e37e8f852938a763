"""What a project helper sets on the objects it is handed, as bindings of its caller.

Research code fills a configuration object in helpers: `init_dist(args, cfg)` sets
`args.gpu = args.local_rank`, `load_cfg(args, cfg)` copies `cfg.RANK_ID = args.gpu` and
`cfg.DISTRIBUTED = args.distributed`. After such a call the caller's `cfg.RANK_ID` holds its
`args.local_rank`, and `if cfg.DISTRIBUTED:` is its launch test. The helper's bindings of an
attribute of a parameter, from (an attribute of) a parameter, are replayed at the call with
the caller's names: only copies, so a replayed binding never holds a value the caller's tree
does not have a place for (a device string, a call) and nothing is ever reported at one. A
binding from anything else (`args.rank = int(os.environ["RANK"])`) is not replayed; it only
tells the caller that what it knew of that attribute no longer holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from ddplint.lint.facts import Assignment, ModuleFacts, process_index_parameter
from ddplint.lint.names import argument_for, parameter_for, reference
from ddplint.lint.roles import Role

if TYPE_CHECKING:
    from ddplint.lint.context import LintContext
    from ddplint.lint.paths import Event


def with_handed_bindings(ctx: LintContext) -> ModuleFacts:
    """The linted module's facts with the bindings its calls of project functions make on the
    objects they hand over, and with the process index of each function it hands a project
    helper that passes it on to mp.spawn (`run_mp(train, n)`: train's first parameter is the
    local rank), as mp.spawn called here gives it (a copy; the facts other files share stay as
    they are), and with the roles of what it imports from the project."""
    facts = ctx.facts
    replayed: list[Assignment] = []
    for site in facts.calls:
        if not site.name or not any(type(a.value) is cst.Name for a in site.node.args):
            continue  # hands over no object by name
        resolved = ctx.resolve_function(facts, ctx.path, site.name)
        if resolved is None or "." in resolved.function:
            continue  # a plain function: a method's first parameter is the object it runs on
        inner, _, function = resolved
        definition = inner.functions[function].node
        handed = {}
        for param in inner.functions[function].params:
            given = argument_for(site.node, definition, param)
            if type(given) is cst.Name:
                handed[param] = given.value
        if not handed:
            continue
        for binding in inner.assignments_within(function):
            owner, _, attribute = binding.target.partition(".")
            if binding.function != function or binding.element or owner not in handed or not attribute or "." in attribute:
                continue
            value = _renamed(binding.value, handed)
            if value is not None:
                replayed.append(
                    Assignment(
                        f"{handed[owner]}.{attribute}", value, site.function, site.order, site.conditions, site.loops, site.blocks
                    )
                )
    indexes = {
        (target, index): Role.LOCAL_RANK
        for target in ctx.spawned_through_helpers()
        if (index := process_index_parameter(facts, target)) is not None and (target, index) not in facts.roles
    }
    roles = {**_imported_roles(ctx), **indexes}
    return facts.with_bindings(replayed, roles) if replayed or roles else facts


def _imported_roles(ctx: LintContext) -> dict[tuple[str, str], Role]:
    """The roles of the names the module imports from a project module that binds them at its
    top level (`from dist_env import RANK` where dist_env.py reads `RANK` from the environment)."""
    facts, roles = ctx.facts, {}
    for local, qualified in facts.imports.items():
        if ("", local) in facts.roles:
            continue
        located = ctx.project.resolve(ctx.path, qualified)
        while located is not None and located.attr and ("", located.attr) not in located.facts.roles:
            onward = located.facts.imports.get(located.attr)  # re-exported by a package
            located = ctx.project.resolve(located.path, onward) if onward else None
        if located is not None and located.attr:
            roles[("", local)] = located.facts.roles[("", located.attr)]
    return roles


def _renamed(value: cst.BaseExpression, handed: dict[str, str]) -> cst.BaseExpression | None:
    """`args.local_rank` in the helper as the caller names it; None for anything but a parameter
    or an attribute of one."""
    if type(value) is cst.Name:
        return cst.Name(handed[value.value]) if value.value in handed else None
    if type(value) is cst.Attribute:
        inner = _renamed(value.value, handed)
        return cst.Attribute(value=inner, attr=cst.Name(value.attr.value)) if inner is not None else None
    return None


def set_by_helper(ctx: LintContext, head: str, attribute: str, site: Event) -> bool:
    """`head` was handed, before `site`, to a project function of another module that sets its
    `attribute` to anything (`setup(args)` doing `args.rank = int(os.environ["RANK"])`): what the
    caller's own tree says of that attribute, an argparse default included, no longer holds.
    A function that reads a module-level `args` sees it after the module's own code handed it
    (`init_distributed_mode(args)` in the `__main__` block, then `train()`)."""
    facts = ctx.facts
    calls = [c for c in facts.calls_in(site.function) if c.order < site.order]
    if site.function and _global_in(facts, head, site.function):
        calls += facts.calls_in("")
    for call in calls:
        if not any(reference(a.value) == head for a in call.node.args):
            continue
        resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, call))
        if resolved is None or resolved.facts is ctx.facts:
            continue
        definition = resolved.facts.functions[resolved.function].node
        params = {p for a in call.node.args if reference(a.value) == head and (p := parameter_for(call.node, definition, a))}
        if any(a.target in {f"{p}.{attribute}" for p in params} for a in resolved.facts.assignments_within(resolved.function)):
            return True
    return False


def _global_in(facts: ModuleFacts, head: str, function: str) -> bool:
    """`head` inside `function` is the module's: neither a parameter nor bound there."""
    info = facts.functions.get(function)
    return (
        info is not None
        and head not in info.params
        and not any(a.function == function for a in facts.assigned(head))
        and any(a.function == "" for a in facts.assigned(head))
    )
