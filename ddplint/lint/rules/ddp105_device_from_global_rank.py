"""DDP105: a GPU index taken from the global rank."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import contains, device_uses
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Rule


class DeviceFromGlobalRank(Rule):
    """Finds a GPU index taken from the global rank instead of the local rank."""

    code = "DDP105"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        # One finding per device built from the rank (`device = f"cuda:{rank}"`), however often it
        # is used, and one per function for the rank used directly as a device: the first place.
        reported: set[object] = set()
        for use in device_uses(ctx):
            if use.kind is not DeviceKind.GLOBAL:
                continue
            key = use.site.function if contains(use.site.node, use.expr) else id(use.expr)
            if key not in reported:
                reported.add(key)
                yield Finding(
                    use.expr,
                    "device chosen by the global rank: on every node but the first it names a GPU "
                    "that does not exist; use LOCAL_RANK (or rank % torch.cuda.device_count())",
                )
