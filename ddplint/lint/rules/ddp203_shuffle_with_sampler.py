"""DDP203: shuffle=True together with a sampler (DataLoader raises ValueError)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.loaders import loader_argument, loaders
from ddplint.lint.names import arg
from ddplint.lint.rules.base import Finding, Remedy, Replace, Rule


class ShuffleWithSampler(Rule):
    """Finds DataLoader(shuffle=True) combined with a sampler, which raises ValueError."""

    code = "DDP203"
    severity = Severity.ERROR

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site in loaders(ctx.facts):
            if ctx.runs_nowhere(site):
                continue  # a branch no call reaches (`elif dataset == "cifar100":` of a builder only called for CIFAR-10)
            shuffle = arg(site.node, 2, "shuffle")
            spread = shuffle is None  # `**loader_kwargs` may hold it (no fix: the dict may serve other loaders)
            if spread:
                shuffle = loader_argument(ctx.facts, site, 2, "shuffle")
            if not (type(shuffle) is cst.Name and shuffle.value == "True"):
                continue
            for keyword, position in (("sampler", 3), ("batch_sampler", 4)):
                given = loader_argument(ctx.facts, site, position, keyword)
                if given is not None and not (type(given) is cst.Name and given.value == "None"):
                    yield Finding(
                        site.node if spread else shuffle,
                        f"shuffle=True together with {keyword}=: DataLoader raises ValueError (sampler "
                        f"option is mutually exclusive with shuffle); drop shuffle=True, the sampler shuffles",
                        None
                        if spread
                        else Remedy("set shuffle=False: the sampler decides the order", Replace(shuffle, cst.Name("False"))),
                    )
                    break
