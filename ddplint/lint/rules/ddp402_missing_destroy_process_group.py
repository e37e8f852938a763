"""DDP402: a process group never destroyed."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import ModuleFacts, never_named
from ddplint.lint.rules.base import Finding, Rule
from ddplint.lint.summaries import Effect
from ddplint.lint.vocabulary import DESTROY_PG, INIT_PG


class MissingDestroyProcessGroup(Rule):
    """Finds a process group that the script initializes and never destroys."""

    code = "DDP402"
    severity = Severity.INFO  # advisory: recent torch warns about it at exit itself

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        # a function the script never names (`def cleanup(): destroy_process_group()` left
        # uncalled) never runs: neither its start nor its teardown counts
        inits = [
            s
            for s in ctx.summaries.sites_with(Effect.INIT_GROUP)
            if not self._through_other_script(ctx, s) and not never_named(facts, s.function)
        ]
        if not inits:
            return
        destroys = [s for s in ctx.summaries.sites_with(Effect.DESTROYS_GROUP) if not never_named(facts, s.function)]
        # a teardown that only the main process reaches (`if rank == 0: destroy_process_group()`)
        # leaves every other rank's group alive; one only the others reach, the main one's; one
        # on each side of the same test (rank 0's early return, and the end) is every rank's
        own = [s for s in destroys if s.name == DESTROY_PG]
        main = [s for s in own if ctx.guards.guarded_here(s)]
        others = [s for s in own if s not in main and ctx.guards.rank_conditional(s)]
        some_ranks = bool(own) and len(main) + len(others) == len(own) and not (main and others)
        if destroys and not some_ranks:
            return
        library = not facts.is_script or ctx.guards.single_process_main(facts, ctx.path)  # (a self-test block)
        # the workers a module starts itself are its own to tear down, unless they run a
        # function they are handed (`launch(fn, n_gpu)` whose worker calls `fn(*args)`)
        workers = {w for w in ctx.spawn_targets(facts) if w in facts.functions and not _runs_a_handed_function(facts, w)}
        if library and not any(s.function == "" or s.function.split(".")[0] in workers for s in inits):
            return  # a library module: whoever calls it decides when to tear down
        direct = [s for s in inits if s.name == INIT_PG] or inits
        site = min(direct, key=lambda s: s.order)
        yield Finding(
            site.node,
            "the process group is destroyed on the main process only: the other ranks leak NCCL "
            "resources at exit and can hang in teardown; call dist.destroy_process_group() on every rank"
            if some_ranks and main
            else "the process group is destroyed on the other ranks only, never on the main process: "
            "it leaks NCCL resources at exit and can hang in teardown; call dist.destroy_process_group() "
            "on every rank"
            if some_ranks
            else "the process group is never destroyed: at exit NCCL resources leak, PyTorch warns and "
            "ranks can hang in teardown; call dist.destroy_process_group() at the end of training",
        )

    @staticmethod
    def _through_other_script(ctx: LintContext, site) -> bool:
        """`detection.main(args)` from a launcher wrapper: main.py is a script that calls its `main`
        itself, and answers for it. A helper module with a test stub under `__main__` that never
        calls the function answers for nothing."""
        resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
        return (
            resolved is not None
            and resolved.facts is not ctx.facts
            and resolved.facts.is_script
            and bool(ctx.guards.callers(resolved.facts).get(resolved.function))
        )


def _runs_a_handed_function(facts: ModuleFacts, function: str) -> bool:
    """The function calls one of its own parameters (`def worker(rank, fn, args): ... fn(*args)`)."""
    params = set(facts.functions[function].params)
    return any(site.name in params for site in facts.calls_within(function))
