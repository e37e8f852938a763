"""bind.distinct: after the script bound its device, every rank drives a different GPU.

Indices cannot be compared across ranks (CUDA_VISIBLE_DEVICES may differ per rank), so the
physical GPU is compared by UUID. The GPU a rank drives is where its DDP model lives when
there is one (a script may move the model to cuda:LOCAL_RANK without set_device), else the
current CUDA device.
"""

from __future__ import annotations

from ddplint.runtime.checks.records import env, group_by, host, node, part, rank_of, ranks_text
from ddplint.runtime.verdict import CheckResult, Status


def _describe(index: int) -> dict:
    import torch

    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "")
    bus = None
    if hasattr(props, "pci_bus_id"):
        bus = f"{props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"
    return {"index": index, "name": props.name, "total_memory": props.total_memory,
            "uuid": uuid if uuid.startswith(("GPU-", "MIG-")) or not uuid else f"GPU-{uuid}",
            "pci_bus_id": bus}


def binding_info(models: list) -> dict:
    """This rank's devices: the current CUDA device and the DDP model's device."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {"device_type": "cpu", "cuda_initialized": False,
                "cuda_available": torch.cuda.is_available()}
    current = torch.cuda.current_device()
    model_index = None
    for model in models:
        param = next(iter(model.parameters()), None)
        if param is not None and param.device.type == "cuda":
            model_index = param.device.index
            break
    used = model_index if model_index is not None else current
    return {"device_type": "cuda", "cuda_initialized": True, "current_device": current,
            "model_device": model_index, "gpu": _describe(used),
            "basis": "DDP model" if model_index is not None else "current device"}


def rank_table(records: list[dict]) -> list[str]:
    lines = [f"{'rank':>4}  {'host':<20} {'node':>4} {'local':>5}  device"]
    for rec in sorted(records, key=rank_of):
        b = part(rec, "binding")
        gpu = b.get("gpu")
        if gpu:
            where = (f"cuda:{gpu['index']} {gpu['name']} {gpu['uuid']}"
                     + (f" (current device cuda:{b['current_device']})"
                        if b.get("model_device") is not None and b["current_device"] != gpu["index"]
                        else ""))
        elif b.get("error"):
            where = f"? ({b['error']})"
        elif not b:
            where = "? (no batch reached)"
        else:
            where = "cpu"
        lines.append(f"{rank_of(rec):>4}  {host(rec):<20} {env(rec).get('GROUP_RANK', '?'):>4} "
                     f"{env(rec).get('LOCAL_RANK', '?'):>5}  {where}")
    return lines


def distinct_check(records: list[dict]) -> CheckResult:
    if not records:
        return CheckResult("bind.distinct", Status.SKIP, "no rank reported")
    table = rank_table(records)
    reached = [r for r in records if part(r, "binding") and not part(r, "binding").get("error")]
    if not reached:
        return CheckResult("bind.distinct", Status.SKIP,
                           "no rank reached its first training batch", table)
    on_gpu = [r for r in reached if part(r, "binding").get("gpu")]
    if not on_gpu:
        available = any(part(r, "binding").get("cuda_available") for r in reached)
        why = ("the script had not touched CUDA by its first batch" if available
               else "no GPU: the ranks run on CPU")
        return CheckResult("bind.distinct", Status.SKIP, why, table)
    shared = {uuid: ranks for uuid, ranks in
              group_by(on_gpu, lambda r: part(r, "binding")["gpu"]["uuid"]).items()
              if len(ranks) > 1}
    data = {"ranks": {rank_of(r): part(r, "binding").get("gpu", {}).get("uuid") for r in reached}}
    if not shared:
        cpu = [rank_of(r) for r in reached if not part(r, "binding").get("gpu")]
        if cpu:
            return CheckResult("bind.distinct", Status.WARN,
                               f"{ranks_text(cpu)} had not used a GPU by the first batch "
                               "while others did", table,
                               "move the model to torch.device('cuda', local_rank) on every rank",
                               data=data)
        return CheckResult("bind.distinct", Status.PASS,
                           f"{len(on_gpu)} ranks on {len(on_gpu)} different GPUs", table, data=data)
    by_rank = {rank_of(r): r for r in on_gpu}
    parts = []
    for uuid, ranks in shared.items():
        gpu = part(by_rank[ranks[0]], "binding")["gpu"]
        where = {node(by_rank[r]) for r in ranks}
        parts.append(f"{ranks_text(ranks)} share GPU cuda:{gpu['index']} {gpu['uuid']} "
                     f"on {', '.join(sorted(where))}")
    return CheckResult(
        "bind.distinct", Status.FAIL, "; ".join(parts), table,
        "bind each rank before building the model: torch.cuda.set_device(int(os.environ"
        "['LOCAL_RANK'])) and use torch.device('cuda', local_rank) (see DDP101, DDP102, DDP103)",
        rule="DDP101", data=data)
