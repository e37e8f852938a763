"""DDP106: a --local_rank flag that torchrun never passes."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import CallSite, local_rank_flag, starts_own_workers
from ddplint.lint.rules.base import Finding, Inside, Rule


class LocalRankArgument(Rule):
    """Finds a --local_rank/--local-rank argument, which only torch.distributed.launch passes."""

    code = "DDP106"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        flags: list[tuple[CallSite, str, Inside | None]] = [
            (site, flag, None) for site in ctx.facts.calls if (flag := local_rank_flag(site)) is not None
        ]
        flags += list(_helper_flags(ctx))
        if (
            not flags
            or starts_own_workers(ctx.facts)
            or "LOCAL_RANK" in ctx.facts.env_reads | ctx.facts.env_names
            or any("LOCAL_RANK" in module.env_reads | module.env_names for module in ctx.imported_project_modules(depth=2))
        ):
            return  # no flag, or the binding comes from the environment and the flag is a leftover
        if "local_rank" not in ctx.facts.attributes and not any(
            "local_rank" in module.attributes for module in ctx.imported_project_modules(depth=2)
        ):
            return  # kept so that torch.distributed.launch does not reject it, and never read
        for site, flag, inside in flags:
            yield Finding(
                site.node,
                f"'{flag}' is only passed by the deprecated torch.distributed.launch: under "
                "torchrun it keeps its default on every rank (torchrun sets LOCAL_RANK in the "
                "environment instead); read int(os.environ['LOCAL_RANK'])",
                inside=(inside,) if inside is not None else (),
            )


def _helper_flags(ctx: LintContext) -> Iterator[tuple[CallSite, str, Inside]]:
    """Calls of a function of another project module that declares the flag on the parser it
    builds (`args = parse_args()` with `parser.add_argument("--local_rank", ...)` in options.py)."""
    seen: set[int] = set()
    for site in ctx.facts.calls:
        resolved = ctx.resolve_function(ctx.facts, ctx.path, ctx.method_target(ctx.facts, site))
        if resolved is None or resolved.facts is ctx.facts:
            continue
        for inner in resolved.facts.calls_within(resolved.function):
            flag = local_rank_flag(inner)
            if flag is not None and id(inner.node) not in seen:
                seen.add(id(inner.node))
                yield site, flag, Inside(resolved.path, inner.node, f"'{flag}' declared here")
                break
