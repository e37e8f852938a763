"""env.launch: NCCL / torch / CUDA / OpenMP settings that commonly break or slow a job."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from ddplint.runtime.checks.common import Findings, truthy
from ddplint.runtime.checks.network import Interface, interface, unusable
from ddplint.runtime.registry import ENV_LAUNCH
from ddplint.runtime.verdict import CheckResult, Status

PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "CUDA_", "GLOO_", "OMP_NUM_THREADS")


def interfaces() -> list[str]:
    return sorted(name for _, name in socket.if_nameindex())


def nccl_ifname_matches(spec: str, names: list[str]) -> list[str]:
    """Interfaces NCCL_SOCKET_IFNAME selects: prefixes, "=" for exact names, "^" to exclude."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    wanted = [p for p in spec.split(",") if p]

    def hit(name: str) -> bool:
        return any(name == p if exact else name.startswith(p) for p in wanted)

    return [n for n in names if hit(n) != exclude]


def launch_env_check(
    environ: dict[str, str],
    nproc: int,
    nnodes: int,
    ifnames: list[str] | None = None,
    cpus: int | None = None,
    ifinfo: Callable[[str], Interface] = interface,
) -> CheckResult:
    """`ifnames`, `cpus` and `ifinfo` (an interface's state and addresses) replace this host's
    in tests."""
    names = interfaces() if ifnames is None else ifnames
    cpus = cpus or os.cpu_count() or 1
    found = Findings()
    get = environ.get

    if truthy(get("NCCL_P2P_DISABLE")):
        found.add(
            Status.WARN,
            "NCCL_P2P_DISABLE=1 sends GPU-to-GPU traffic through host memory instead of NVLink/PCIe peer-to-peer",
            "unset NCCL_P2P_DISABLE unless a broken P2P path was measured",
        )
    if get("NCCL_P2P_LEVEL", "").upper() in ("LOC", "0"):
        found.add(Status.WARN, f"NCCL_P2P_LEVEL={get('NCCL_P2P_LEVEL')} disables peer-to-peer", "unset NCCL_P2P_LEVEL")
    if truthy(get("NCCL_SHM_DISABLE")):
        found.add(Status.WARN, "NCCL_SHM_DISABLE=1 forces intra-node traffic without P2P onto sockets", "unset NCCL_SHM_DISABLE")
    if truthy(get("NCCL_IB_DISABLE")):
        if nnodes > 1:
            found.add(
                Status.WARN,
                "NCCL_IB_DISABLE=1 on a multi-node job: inter-node traffic falls back to TCP sockets",
                "unset NCCL_IB_DISABLE where InfiniBand/RoCE is available",
            )
        else:
            found.add(Status.INFO, "NCCL_IB_DISABLE=1 (no effect on a single node)")
    spec = get("NCCL_SOCKET_IFNAME")
    if spec:
        picked = nccl_ifname_matches(spec, names)
        if not picked:
            found.add(
                Status.FAIL,
                f"NCCL_SOCKET_IFNAME={spec} selects no interface of this host (it has {', '.join(names)})",
                f"set NCCL_SOCKET_IFNAME to one of {', '.join(names)} or unset it",
            )
        elif dead := unusable(picked, ifinfo):
            found.add(
                Status.FAIL,
                f"NCCL_SOCKET_IFNAME={spec} selects only interfaces that cannot carry NCCL's connections ({'; '.join(dead)})",
                "bring the interface up with an address, or point NCCL_SOCKET_IFNAME at one that has one (ip addr)",
            )
    gloo = get("GLOO_SOCKET_IFNAME")
    if gloo:
        missing = [n for n in gloo.split(",") if n and n not in names]
        if missing:
            found.add(
                Status.FAIL,
                f"GLOO_SOCKET_IFNAME names {', '.join(missing)}, which this host does not have (it has {', '.join(names)})",
                f"set GLOO_SOCKET_IFNAME to one of {', '.join(names)} or unset it",
            )
    if truthy(get("CUDA_LAUNCH_BLOCKING")):
        found.add(
            Status.WARN,
            "CUDA_LAUNCH_BLOCKING=1 makes every kernel launch synchronous "
            "(a debugging switch: training runs several times slower)",
            "unset CUDA_LAUNCH_BLOCKING",
        )
    for name in ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"):
        if truthy(get(name)):
            found.add(
                Status.WARN,
                f"{name}=1 makes the host wait on every collective",
                f"unset {name}; TORCH_NCCL_ASYNC_ERROR_HANDLING=1 handles failures",
            )
    if get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0":
        found.add(
            Status.WARN,
            "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a failed collective hangs the job instead of ending it",
            "unset TORCH_NCCL_ASYNC_ERROR_HANDLING (torchrun sets it to 1)",
        )
    if "NCCL_ASYNC_ERROR_HANDLING" in environ:
        found.add(Status.INFO, "NCCL_ASYNC_ERROR_HANDLING is the old name of TORCH_NCCL_ASYNC_ERROR_HANDLING")
    if get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        found.add(
            Status.WARN,
            "TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective (a debugging switch that slows training)",
            "unset TORCH_DISTRIBUTED_DEBUG once the hang is found",
        )
    if get("NCCL_DEBUG", "").upper() == "TRACE":
        found.add(Status.WARN, "NCCL_DEBUG=TRACE logs every call and slows collectives", "use NCCL_DEBUG=INFO or unset it")
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        if get(name):
            found.add(Status.INFO, f"{name}={get(name)} overrides NCCL's own choice")
    omp = get("OMP_NUM_THREADS")
    if omp and omp.isdigit() and int(omp) * nproc > cpus:
        found.add(
            Status.WARN,
            f"OMP_NUM_THREADS={omp} x {nproc} processes = {int(omp) * nproc} threads on {cpus} CPUs (oversubscribed)",
            f"set OMP_NUM_THREADS={max(1, cpus // nproc)}",
        )

    evidence = [f"{k}={v}" for k, v in sorted(environ.items()) if k.startswith(PREFIXES)]
    if not evidence:
        evidence.append("no NCCL_*, TORCH_NCCL_*, CUDA_*, GLOO_* or OMP_NUM_THREADS set")
    if not get("NCCL_DEBUG"):
        evidence.append(
            "NCCL_DEBUG is unset: while diagnosing a hang or slow collective, run "
            "with NCCL_DEBUG=INFO to see NCCL's transports and errors"
        )
    evidence += [m for s, m, _ in found.items if s is Status.INFO]
    problems = [i for i in found.items if i[0] is not Status.INFO]
    if not problems:
        return CheckResult(ENV_LAUNCH, Status.PASS, "no launch setting known to break or slow a job", evidence)
    shown = Findings()
    shown.items = problems
    return CheckResult(ENV_LAUNCH, shown.status, shown.summary, evidence, shown.fix)
