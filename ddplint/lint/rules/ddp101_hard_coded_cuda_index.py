"""DDP101: a hard-coded CUDA index puts every rank on the same GPU."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.lint.context import LintContext
from ddplint.lint.devices import (
    device_uses,
    visible_devices_per_rank,
)
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Rule


class HardCodedCudaIndex(Rule):
    code = "DDP101"
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        if visible_devices_per_rank(ctx):
            return
        for use in device_uses(ctx):
            if use.kind is DeviceKind.INDEX:
                yield Finding(
                    use.expr,
                    f"device index {use.index} is hard-coded: every rank uses GPU {use.index}; "
                    "use the local rank (int(os.environ['LOCAL_RANK'])) instead",
                )
