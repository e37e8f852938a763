"""gpu.topology: how the job's GPUs talk to each other, and what bandwidth that allows."""

from __future__ import annotations

from ddplint.runtime.checks.common import Findings, plural
from ddplint.runtime.nvml import (
    NVLINK_VERSIONS,
    PCIE_LANE_GBPS,
    Machine,
    cpu_list,
    links_within,
    nvlink_count,
    nvlink_rate,
)
from ddplint.runtime.registry import GPU_TOPOLOGY
from ddplint.runtime.verdict import CheckResult, Status

LEGEND = (
    "X = self, NV# = # NVLinks, PIX = one PCIe bridge, PXB = several PCIe bridges, "
    "PHB = PCIe host bridge, NODE = host bridges within a NUMA node, "
    "SYS = across NUMA nodes (the inter-socket link)"
)


def link_matrix(machine: Machine, job: list[int]) -> list[str]:
    """The job's part of `nvidia-smi topo -m`, with CPU and NUMA affinity columns."""
    head = "".join(f"{machine.gpus[i].label:<7}" for i in job)
    rows = [f"{'':<7}{head}{'CPU Affinity':<18}NUMA Affinity"]
    for i in job:
        gpu = machine.gpus[i]
        cells = "".join(f"{machine.link(i, j):<7}" for j in job)
        numa = "N/A" if gpu.numa_node is None else str(gpu.numa_node)
        rows.append(f"{gpu.label:<7}{cells}{cpu_list(gpu.cpus):<18}{numa}")
    return rows


def expected_busbw(machine: Machine, job: list[int]) -> tuple[float | None, str]:
    """What the links allow an all_reduce's bus bandwidth to reach, GB/s, and why.

    nccl-tests' busbw of a ring all_reduce approaches the slowest GPU's one-direction link
    bandwidth: when every pair has NVLink, the GPU's links that reach the job's other GPUs
    (all of them through NVSwitch, only those to job peers on a direct mesh) x the per-link
    rate; else the PCIe link.
    """
    if len(job) < 2:
        return None, "one GPU"
    pairs = [(i, j) for i in job for j in job if i < j]
    if all(nvlink_count(machine, i, j) for i, j in pairs):
        best: tuple[float | None, str] = (None, "no GPU")
        for i in job:
            gpu = machine.gpus[i]
            active = gpu.active_links
            rate = nvlink_rate(active[0].get("version"), gpu.compute_capability) if active else None
            if rate is None:
                return None, f"{gpu.label}: unknown NVLink version"
            links = links_within(machine, i, job)
            gbps = links * rate[1]
            if best[0] is None or gbps < best[0]:
                best = (gbps, f"NVLink {rate[0]} x{links} ({rate[1]:g} GB/s per link and direction)")
        return best
    worst_pcie: tuple[float | None, str] = (None, "no GPU")  # len(job) >= 2: the loop sets or returns
    for i in job:
        pcie = machine.gpus[i].pcie
        if not pcie or pcie.get("max_gen") not in PCIE_LANE_GBPS:
            return None, f"{machine.gpus[i].label}: PCIe link unknown"
        gbps = PCIE_LANE_GBPS[pcie["max_gen"]] * pcie["max_width"]
        if worst_pcie[0] is None or gbps < worst_pcie[0]:
            worst_pcie = (gbps, f"PCIe gen{pcie['max_gen']} x{pcie['max_width']}")
    return worst_pcie


def topology_check(machine: Machine, job: list[int]) -> CheckResult:
    if len(job) < 2:
        return CheckResult(
            GPU_TOPOLOGY,
            Status.SKIP,
            f"{plural(len(job), 'GPU')} per node: no GPU-to-GPU link to check",
            link_matrix(machine, job) if job else [],
        )
    found = Findings()
    evidence = link_matrix(machine, job) + [f"Legend: {LEGEND}"]
    active_counts = {i: len(machine.gpus[i].active_links) for i in job}
    most = max(active_counts.values())
    for i in job:
        links = machine.gpus[i].nvlinks
        if not links:
            continue
        code = links[0].get("version")
        version = NVLINK_VERSIONS[code][0] if code in NVLINK_VERSIONS else "?"
        down = [link["link"] for link in links if link.get("state") != 1]
        label = machine.gpus[i].label
        evidence.append(
            f"{label}: {active_counts[i]}/{len(links)} NVLinks active "
            f"(NVLink {version})" + (f", inactive: {down}" if down else "")
        )
        if active_counts[i] < most:
            found.add(
                Status.WARN,
                f"{label} has {active_counts[i]} active NVLinks where its "
                f"peers have {most}: a degraded link slows every collective",
                f"check `nvidia-smi nvlink -s -i {machine.gpus[i].index}` and have the link or GPU serviced",
            )
    sys_pairs = [(i, j) for i in job for j in job if i < j and machine.link(i, j) == "SYS"]
    if sys_pairs:
        shown = ", ".join(f"{machine.gpus[i].label}-{machine.gpus[j].label}" for i, j in sys_pairs[:6])
        more = f" and {len(sys_pairs) - 6} more" if len(sys_pairs) > 6 else ""
        found.add(
            Status.WARN,
            f"{shown}{more} connect through SYS (across CPU sockets): NCCL traffic crosses the inter-socket link",
            _same_socket_fix(machine, job),
        )
    gbps, basis = expected_busbw(machine, job)
    if gbps:
        evidence.append(f"links allow an all_reduce bus bandwidth of about {gbps:.0f} GB/s ({basis})")
    summary = found.summary if found.items else (f"{len(job)} GPUs linked by {basis}" if gbps else f"{len(job)} GPUs")
    return CheckResult(
        GPU_TOPOLOGY,
        found.status,
        summary,
        evidence,
        found.fix,
        data={
            "gpus": job,
            "matrix": [[machine.link(i, j) for j in job] for i in job],
            "expected_busbw_gbps": gbps,
            "basis": basis,
        },
    )


def _same_socket_fix(machine: Machine, job: list[int]) -> str:
    by_node: dict[int, list[int]] = {}
    for pos, gpu in enumerate(machine.gpus):  # positions: CUDA_VISIBLE_DEVICES counts those
        if gpu.numa_node is not None:
            by_node.setdefault(gpu.numa_node, []).append(pos)
    for node, gpus in sorted(by_node.items()):
        if len(gpus) >= len(job):
            picked = ",".join(str(g) for g in gpus[: len(job)])
            return (
                f"keep the job on one socket (CUDA_VISIBLE_DEVICES={picked}, NUMA node "
                f"{node}) or expect lower all_reduce bandwidth"
            )
    return "expect lower all_reduce bandwidth; bind each rank to its GPU's NUMA node"
