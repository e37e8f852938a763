"""DDP101: a hard-coded CUDA index puts every rank on the same GPU."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.devices import (
    CUDA_INDEX,
    DeviceUse,
    contains,
    device_uses,
    visible_devices_per_rank,
)
from ddplint.lint.local_rank import LocalRank, local_rank_at
from ddplint.lint.names import arg, string_value, with_argument
from ddplint.lint.paths import Event
from ddplint.lint.roles import DeviceKind
from ddplint.lint.rules.base import Finding, Remedy, Replace, Rule


class HardCodedCudaIndex(Rule):
    """Finds a fixed GPU index ("cuda:0", .cuda(0), set_device(0)) that puts every rank on one GPU."""

    code = "DDP101"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        indices = [use for use in device_uses(ctx) if use.kind is DeviceKind.INDEX]
        if not indices or visible_devices_per_rank(ctx):  # asked last: it follows every helper
            return
        for use in indices:
            yield Finding(
                use.expr,
                f"device index {use.index} is hard-coded: every rank uses GPU {use.index}; "
                "use the local rank (int(os.environ['LOCAL_RANK'])) instead",
                _local_rank_fix(ctx, use),
            )


def _local_rank_fix(ctx: LintContext, use: DeviceUse) -> Remedy | None:
    """The local rank in place of GPU 0, where a name holds it at the literal's place. Another
    index is left alone: `cuda:1` is more often a second GPU per process than a forgotten rank.

    Unsafe: the name may hold -1 or be unset in a single-process run that the index served.
    """
    if use.index != 0:
        return None
    place = _place(ctx, use)
    holder = local_rank_at(ctx, place) if place is not None else None
    replacement = _with_local_rank(use.expr, holder) if holder is not None else None
    if holder is None or replacement is None:
        return None
    return Remedy(f"use the local rank ({holder.code}) instead of GPU 0", Replace(use.expr, replacement), safe=False)


def _place(ctx: LintContext, use: DeviceUse) -> Event | None:
    """Where the literal is evaluated: in the call that uses it, or in the binding that holds it."""
    if contains(use.site.node, use.expr):
        return use.site
    bindings = ctx.facts.bindings_of(use.expr)
    return bindings[0] if len(bindings) == 1 else None


def _with_local_rank(expr: cst.BaseExpression, holder: LocalRank) -> cst.BaseExpression | None:
    """The same device on the local rank, in the literal's own quotes (a fix inside an f-string
    must not reuse the f-string's quotes before Python 3.12)."""
    index = cst.parse_expression(holder.code if holder.is_int else f"int({holder.code})")
    if type(expr) is cst.Integer:
        return index
    if type(expr) is cst.SimpleString:
        return _device_string(expr, holder)
    if type(expr) is cst.Call:  # torch.device("cuda", 0) or torch.device("cuda:0")
        if arg(expr, 1, "index") is not None:
            return with_argument(expr, "index", 1, index)
        given = arg(expr, 0, "type")
        text = _device_string(given, holder) if type(given) is cst.SimpleString else None
        return with_argument(expr, "type", 0, text) if text is not None else None
    return None


def _device_string(literal: cst.SimpleString, holder: LocalRank) -> cst.BaseExpression | None:
    text = string_value(literal)
    if literal.prefix or text is None or not CUDA_INDEX.match(text):
        return None
    return cst.parse_expression(f"f{literal.quote}cuda:{{{holder.code}}}{literal.quote}")
