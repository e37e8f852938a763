"""DDP106: a --local_rank flag that torchrun never passes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import Assignment, CallSite, ModuleFacts, in_main_block, local_rank_flag, names_read, starts_own_workers
from ddplint.lint.guards import Kind
from ddplint.lint.names import dotted, reference
from ddplint.lint.paths import joined
from ddplint.lint.resolver import Resolved
from ddplint.lint.rules.base import Finding, Inside, Rule
from ddplint.lint.summaries import Effect

PARSE_METHODS = frozenset({"parse_args", "parse_known_args"})
HELPER_DEPTH = 1  # the helper's own calls of its module's functions: merge_config() -> get_args()


class LocalRankArgument(Rule):
    """Finds a --local_rank/--local-rank argument, which only torch.distributed.launch passes."""

    code = "DDP106"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        # `--local-rank` beside `--local_rank` (both spellings kept for old launchers) is one option
        own = [(site.node, flag) for site in ctx.facts.calls if (flag := local_rank_flag(site)) is not None]
        flags: list[tuple[cst.CSTNode, str, Inside | None]] = [(node, flag, None) for node, flag in own[:1]]
        flags += list(_helper_flags(ctx))
        if (
            not flags
            or starts_own_workers(ctx.facts)
            or ctx.summaries.sites_with(Effect.SPAWNS_WORKERS)
            or "LOCAL_RANK" in ctx.facts.env_reads | ctx.facts.env_names
            or any("LOCAL_RANK" in module.env_reads | module.env_names for module in ctx.imported_project_modules(depth=2))
        ):
            return  # no flag, workers started here or by a helper, or the environment gives the rank
        if _entry_runs_alone(ctx):
            return  # run as a script it is one process; a launcher of its own calls its functions
        if not any("local_rank" in module.attributes for module in ctx.imported_project_modules(depth=2)) and (
            "local_rank" not in ctx.facts.attributes or _overwritten_before_reads(ctx)
        ):
            return  # kept so that torch.distributed.launch does not reject it, and its value never read
        for node, flag, inside in flags:
            yield Finding(
                node,
                f"'{flag}' is only passed by the deprecated torch.distributed.launch: under "
                "torchrun it keeps its default on every rank (torchrun sets LOCAL_RANK in the "
                "environment instead); read int(os.environ['LOCAL_RANK'])",
                inside=(inside,) if inside is not None else (),
            )


def _entry_runs_alone(ctx: LintContext) -> bool:
    """The `__main__` block asserts that the process runs without distribution (`assert
    args.rank == -1 and args.local_rank == 0`): torchrun is not how the script is launched."""
    facts = ctx.facts
    return any(
        in_main_block(a) and ctx.guards.test_kind(a.test, facts, ctx.path, a.function) is Kind.SINGLE for a in facts.asserts
    )


def _overwritten_before_reads(ctx: LintContext) -> bool:
    """Every read of the option (`torch.cuda.set_device(args.local_rank)`) comes after the script
    sets it itself (`args.local_rank = int(os.environ["LOCAL_RANK"])`) in the same function: the
    parsed value is never used."""
    facts = ctx.facts
    found = False
    events: list[CallSite | Assignment] = [*facts.calls, *facts.assignments]
    for event in events:
        for name in names_read(event):
            if name.rsplit(".", 1)[-1] != "local_rank" or "." not in name:
                continue
            found = True
            # set on every path to the read, by one binding or one in each arm of an if/else
            # (`if not args.distributed: args.local_rank = 0` alone is not)
            if not joined(facts.reaching(name, event.function, event.order, event.blocks), event, facts):
                return False
    return found


def _helper_flags(ctx: LintContext) -> Iterator[tuple[cst.CSTNode, str, Inside]]:
    """Calls that reach a parser of another project module declaring the flag: a function that
    builds it (`args = parse_args()` with `parser.add_argument("--local_rank", ...)` in
    options.py), or one that calls such a function of its module (`merge_config()` calling
    `get_args()`), or a parser built at the top of another module (`from opts import parser`;
    `parser.parse_args()`)."""
    seen: set[int] = set()
    for site in ctx.facts.calls:
        found = _declared_by_call(ctx, site)
        if found is not None and id(found[1].node) not in seen:
            path, declared, flag = found
            seen.add(id(declared.node))
            yield site.node, flag, Inside(path, declared.node, f"'{flag}' declared here")
    yield from _parsed_on_import(ctx, seen)


def _parsed_on_import(ctx: LintContext, seen: set[int]) -> Iterator[tuple[cst.CSTNode, str, Inside]]:
    """Options that another project module parses at its top level, imported already parsed
    (`from options import opts` where options.py ends with `opts = parser.parse_args()`):
    reported at the import."""
    lines = [statement.body for statement in ctx.module.body if type(statement) is cst.SimpleStatementLine]
    for node in (small for line in lines for small in line):
        if type(node) is not cst.ImportFrom or isinstance(node.names, cst.ImportStar):
            continue
        for alias in node.names:
            local = dotted(alias.asname.name if alias.asname is not None else alias.name)
            qualified = ctx.facts.imports.get(local) if local else None
            chain = ctx.through_reexports(ctx.path, qualified) if qualified else []
            located = chain[-1] if chain else None
            if located is None or not located.attr or located.facts is ctx.facts:
                continue
            top = [c for c in located.facts.calls if c.function == ""]
            parses = {id(c.node) for c in top if c.method in PARSE_METHODS}
            parsed = any(
                not a.element and a.function == "" and id(a.value) in parses for a in located.facts.assigned(located.attr)
            )
            found = _first_flag(located.path, top) if parsed else None
            if found is not None and id(found[1].node) not in seen:
                seen.add(id(found[1].node))
                yield alias, found[2], Inside(found[0], found[1].node, f"'{found[2]}' declared here")


def _declared_by_call(ctx: LintContext, site: CallSite) -> tuple[Path, CallSite, str] | None:
    if site.method in PARSE_METHODS and type(site.node.func) is cst.Attribute:
        parser = reference(site.node.func.value)
        located = ctx.project.resolve(ctx.path, ctx.facts.qualify(parser) or parser) if parser else None
        if located is not None and located.attr and located.facts is not ctx.facts:
            return _first_flag(located.path, [c for c in located.facts.calls if c.function == ""])
    target = ctx.method_target(ctx.facts, site)
    resolved = ctx.resolve_function(ctx.facts, ctx.path, target)
    if resolved is None or resolved.facts is ctx.facts:
        return None
    # `TrainOptions().parse()`: the base class's parse() calls `self.initialize()`, which is
    # TrainOptions' own where it overrides it
    instance = target.rpartition(".")[0] if target and "." in resolved.function else ""
    return _declared_in(ctx, resolved, HELPER_DEPTH, instance)


def _declared_in(ctx: LintContext, resolved: Resolved, depth: int, instance: str = "") -> tuple[Path, CallSite, str] | None:
    facts, path, function = resolved
    calls = facts.calls_within(function)
    if any(_parses_a_global(facts, c, function) for c in calls):
        calls = [*calls, *(c for c in facts.calls if c.function == "")]  # its flags are declared at the top
    found = _first_flag(path, calls)
    if found is not None or depth == 0:
        return found
    for inner in calls:
        overriding = _overridden(ctx, inner, instance)
        called = overriding or ctx.resolve_function(facts, path, ctx.method_target(facts, inner))
        if called is not None and (called.facts is facts or overriding) and called.function != function:
            found = _declared_in(ctx, called, depth - 1, instance)
            if found is not None:
                return found
    return None


def _overridden(ctx: LintContext, call: CallSite, instance: str) -> Resolved | None:
    """`self.initialize()` inside an inherited method, as the class of the object defines it."""
    if not instance or not call.name or not call.name.startswith("self.") or call.name.count(".") != 1:
        return None
    return ctx.resolve_function(ctx.facts, ctx.path, f"{instance}.{call.name[5:]}")


def _parses_a_global(facts: ModuleFacts, call: CallSite, function: str) -> bool:
    """`parser.parse_known_args()` inside `get_args()`, of a parser the module builds at its top
    level (`parser = argparse.ArgumentParser()`, its flags added there)."""
    receiver = reference(call.node.func.value) if call.method in PARSE_METHODS and type(call.node.func) is cst.Attribute else None
    return receiver is not None and not any(a.function == function for a in facts.assigned(receiver))


def _first_flag(path: Path, calls: list[CallSite]) -> tuple[Path, CallSite, str] | None:
    return next(((path, c, flag) for c in calls if (flag := local_rank_flag(c)) is not None), None)
