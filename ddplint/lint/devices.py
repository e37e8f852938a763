"""Where a script places tensors and models on a device, and what device each place names.

Shared by the device-binding rules (DDP101-DDP105): they differ only in which kind of
device expression they report.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from ddplint.lint.context import LintContext
from ddplint.lint.facts import DDP, INIT_PG, SET_DEVICE, CallSite
from ddplint.lint.names import arg, int_value, string_value

CUDA_INDEX = re.compile(r"^cuda:(\d+)$")
# set_device, and launchers of other libraries that call it for the process they start.
BINDING = frozenset({
    SET_DEVICE, "mmcv.runner.init_dist", "mmcv.runner.dist_utils.init_dist", "mmengine.dist.init_dist",
    "mmengine.dist.utils.init_dist", "detectron2.engine.launch", "detectron2.engine.launch.launch",
    "classy_vision.generic.distributed_util.set_cuda_device_index",
})


@dataclass(frozen=True)
class DeviceUse:
    site: CallSite
    expr: cst.BaseExpression  # the node that names the device (reported on)
    kind: str  # "index" (hard-coded N), "bare" ("cuda"), "global", "local", "other"
    index: int | None = None
    placement: bool = True  # moves data or binds a device (not just builds a torch.device)


def classify(ctx: LintContext, expr: cst.BaseExpression | None, function: str, int_is_index: bool) -> tuple[str, int | None]:
    """What device an expression names."""
    if expr is None:
        return "bare", None
    text = string_value(expr)
    if text is not None:
        match = CUDA_INDEX.match(text)
        if match:
            return "index", int(match.group(1))
        return ("bare", None) if text == "cuda" else ("other", None)
    number = int_value(expr)
    if number is not None:
        return ("index", number) if int_is_index else ("other", None)
    if isinstance(expr, cst.Call) and ctx.facts.callee(expr) == "torch.device":
        return _torch_device(ctx, expr, function)
    kind = ctx.facts.kind_of(expr, function)
    if kind in {"local", "device"}:
        return "local", None
    if kind == "global":
        return "global", None
    return "other", None


def _torch_device(ctx: LintContext, call: cst.Call, function: str) -> tuple[str, int | None]:
    first = arg(call, 0, "type")
    index = arg(call, 1, "index")
    if index is None:
        return classify(ctx, first, function, int_is_index=True)
    if string_value(first) != "cuda":
        return "other", None
    return classify(ctx, index, function, int_is_index=True)


def device_uses(ctx: LintContext) -> Iterator[DeviceUse]:
    for site in ctx.facts.calls:
        call = site.node
        fn = site.function
        if site.name == "torch.device":
            if arg(call, 1, "index") is not None or string_value(arg(call, 0, "type")) is not None:
                kind, index = _torch_device(ctx, call, fn)
                yield DeviceUse(site, call, kind, index, placement=False)
            continue
        if site.name == SET_DEVICE:
            target = arg(call, 0, "device")
            if target is not None:
                kind, index = classify(ctx, target, fn, int_is_index=True)
                yield DeviceUse(site, target, kind, index)
            continue
        if site.method == "cuda":
            target = arg(call, 0, "device")
            kind, index = classify(ctx, target, fn, int_is_index=True)
            yield DeviceUse(site, target if target is not None else call, kind, index)
        elif site.method == "to":
            target = arg(call, 0, "device")
            if target is not None and not isinstance(target, cst.Call):
                kind, index = classify(ctx, target, fn, int_is_index=True)
                yield DeviceUse(site, target, kind, index)
        if site.name == DDP:
            ids = arg(call, None, "device_ids")
            if isinstance(ids, cst.List) and len(ids.elements) == 1:
                target = ids.elements[0].value
                kind, index = classify(ctx, target, fn, int_is_index=True)
                yield DeviceUse(site, target, kind, index)
        for keyword in ("device", "map_location"):
            target = arg(call, None, keyword)
            if target is None or site.method == "to" and keyword == "device":
                continue
            kind, index = classify(ctx, target, fn, int_is_index=False)
            if kind == "bare" and keyword == "map_location":
                continue  # map_location="cuda" maps onto the current device
            yield DeviceUse(site, target, kind, index)


# `torch_device = getattr(torch, device_type); torch_device.set_device(device)` (torchtune)
BINDING_METHODS = frozenset({"set_device", "set_device_index"})


def _binds(site: CallSite, facts, path) -> bool:
    return site.name in BINDING or site.method in BINDING_METHODS


def binding_sites(ctx: LintContext) -> list[CallSite]:
    """Calls that bind the process to its GPU: set_device, directly or inside a project helper."""
    return [*ctx.anywhere_if("binds a device", _binds),
            *(s for s in ctx.facts.calls_to(INIT_PG) if arg(s.node, None, "device_id") is not None)]


def visible_devices_per_rank(ctx: LintContext) -> bool:
    """The script narrows CUDA_VISIBLE_DEVICES per process: then "cuda:0" is that rank's GPU."""
    write = ctx.facts.env_writes.get("CUDA_VISIBLE_DEVICES")
    if write is None:
        return False
    return ctx.facts.kind_of(write.value, write.function) is not None or string_value(write.value) is None
