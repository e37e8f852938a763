"""DDP203: shuffle=True together with a sampler (DataLoader raises ValueError)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.lint.context import LintContext
from ddplint.lint.loaders import loaders
from ddplint.lint.names import arg
from ddplint.lint.rules.base import Finding, Rule


class ShuffleWithSampler(Rule):
    code = "DDP203"

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        for site in loaders(ctx.facts):
            shuffle = arg(site.node, 2, "shuffle")
            if not (isinstance(shuffle, cst.Name) and shuffle.value == "True"):
                continue
            for keyword, position in (("sampler", 3), ("batch_sampler", 4)):
                given = arg(site.node, position, keyword)
                if given is not None and not (isinstance(given, cst.Name) and given.value == "None"):
                    yield Finding(
                        shuffle,
                        f"shuffle=True together with {keyword}=: DataLoader raises ValueError (sampler "
                        f"option is mutually exclusive with shuffle); drop shuffle=True, the sampler shuffles",
                        replacement=cst.Name("False"),
                        fix_description="set shuffle=False: the sampler decides the order",
                    )
                    break
