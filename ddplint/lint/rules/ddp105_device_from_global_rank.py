"""DDP105: a GPU index taken from the global rank."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.lint.context import LintContext
from ddplint.lint.devices import device_uses
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Rule


class DeviceFromGlobalRank(Rule):
    code = "DDP105"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        reported: set[str] = set()  # one finding per function: the first place the rank picks a GPU
        for use in device_uses(ctx):
            if use.kind is DeviceKind.GLOBAL and use.site.function not in reported:
                reported.add(use.site.function)
                yield Finding(
                    use.expr,
                    "device chosen by the global rank: on every node but the first it names a GPU "
                    "that does not exist; use LOCAL_RANK (or rank % torch.cuda.device_count())",
                )
