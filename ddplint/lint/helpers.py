"""A question about what a call into another module of the project does, answered once per
function it reaches: does it restore a checkpoint without map_location, pin the rendezvous port.
The linted module's own functions are judged where they act, not at their calls."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ddplint.lint.facts import CallSite, ModuleFacts

if TYPE_CHECKING:
    from ddplint.lint.context import LintContext

T = TypeVar("T")


def ask_helper(
    ctx: LintContext,
    site: CallSite,
    facts: ModuleFacts,
    path: Path,
    question: Hashable,
    answer: Callable[[ModuleFacts, Path, str], T],
    unknown: T,
    top: bool = False,
) -> T:
    """`answer(facts, path, function)` for the project function `site` calls (memoised; a
    recursive call gets `unknown`); `unknown` too for a call that reaches no project function,
    or, with `top`, one of the linted module."""
    resolved = ctx.resolve_function(facts, path, ctx.method_target(facts, site))
    if resolved is None or resolved.facts is ctx.facts and top:
        return unknown
    inner_facts, inner_path, function = resolved
    key = (id(inner_facts), function, question)
    if key not in ctx.memo:
        ctx.memo[key] = unknown  # a recursive call adds nothing
        ctx.memo[key] = answer(inner_facts, inner_path, function)
    return ctx.memo[key]
