"""DDP106: a --local_rank flag that torchrun never passes."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.facts import local_rank_flag, starts_own_workers
from ddplint.lint.rules.base import Finding, Rule


class LocalRankArgument(Rule):
    """Finds a --local_rank/--local-rank argument, which only torch.distributed.launch passes."""

    code = "DDP106"
    data_parallel = True
    severity = Severity.WARNING

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        flags = [(site, flag) for site in ctx.facts.calls if (flag := local_rank_flag(site)) is not None]
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
        for site, flag in flags:
            yield Finding(
                site.node,
                f"'{flag}' is only passed by the deprecated torch.distributed.launch: under "
                "torchrun it keeps its default on every rank (torchrun sets LOCAL_RANK in the "
                "environment instead); read int(os.environ['LOCAL_RANK'])",
            )
