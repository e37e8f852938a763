"""The verdicts over all ranks, on records shaped as the probe writes them. GPU records use the
devices of the recorded machines in fixtures/nvml/ (there is no GPU to produce them here)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddplint.runtime.checks.binding import distinct_check
from ddplint.runtime.checks.comm import allreduce_check, bandwidth_check, bandwidth_row
from ddplint.runtime.checks.consistency import consistent_check, package_diff
from ddplint.runtime.checks.memory import fit_check
from ddplint.runtime.checks.rank import rank_checks
from ddplint.runtime.checks.ranks import ranks_check
from ddplint.runtime.checks.stack import versions_check
from ddplint.runtime.plain import from_plain
from ddplint.runtime.records import RankRecord
from ddplint.runtime.verdict import Status

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
H100 = json.loads((FIXTURES / "h100_sxm_8x_nvswitch.json").read_text())
PACKAGES = ["numpy==2.1.3", "torch==2.4.1", "triton==3.0.0"]
VERSIONS = {
    "python": "3.11.9",
    "torch": "2.4.1+cu124",
    "cuda": "12.4",
    "cudnn": 90100,
    "nccl": "2.20.5",
    "cuda_available": True,
    "device_count": 8,
    "packages": PACKAGES,
    "packages_hash": "a1",
    "script": "/job/train.py",
    "script_sha256": "5e" * 32,
    "git_commit": "c0ffee" * 6 + "abcd",
}


def gpu(index: int, machine=H100) -> dict:
    d = machine["devices"][index]
    return {
        "index": index,
        "name": d["name"],
        "uuid": d["uuid"],
        "total_memory": d["memory"]["total"],
        "pci_bus_id": d["pci_bus_id"],
    }


def record(
    rank: int,
    *,
    world: int = 2,
    per_node: int = 2,
    host: str | None = None,
    versions: dict | None = None,
    binding: dict | None = None,
    comm: dict | None = None,
    nvml: dict | None = None,
    **env,
) -> RankRecord:
    group, local = divmod(rank, per_node)
    identity = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(per_node),
        "GROUP_RANK": str(group),
        "MASTER_ADDR": "10.1.0.1",
        "MASTER_PORT": "29500",
    }
    identity.update({k: str(v) for k, v in env.items()})
    info = {"hostname": host or f"gpu-node-{group}", "env": identity, "versions": copy.deepcopy(versions or VERSIONS)}
    if nvml is not None and local == 0:
        info["nvml"] = nvml
    return RankRecord.from_plain(
        {
            "rank": rank,
            "local_rank": local,
            "world_size": world,
            "node": info["hostname"],
            "init_called": True,
            "info": info,
            "comm": comm or {},
            "binding": binding or {},
        }
    )


NVML_OK = {
    "driver_version": "550.54.15",
    "cuda_driver_version": 12040,
    "visible": 8,
    "uuids": [d["uuid"] for d in H100["devices"]],
    "expected_busbw_gbps": 450.0,
    "basis": "NVLink 4.0 x18 (25 GB/s per link and direction)",
}


# ---- stack.consistent -------------------------------------------------------------------


def test_identical_ranks_are_consistent():
    r = consistent_check([record(i, world=4) for i in range(4)])
    assert r.status is Status.PASS
    assert r.summary.startswith("4 ranks on 2 nodes run the same script, torch 2.4.1+cu124")


def test_a_node_with_other_script_and_packages_fails_with_a_table():
    other = dict(
        VERSIONS, script_sha256="77" * 32, packages_hash="b2", packages=["numpy==1.26.4", "torch==2.4.1", "wandb==0.17.0"]
    )
    recs = [record(i, world=4, versions=other if i >= 2 else None) for i in range(4)]
    r = consistent_check(recs)
    assert r.status is Status.FAIL
    assert r.summary == "packages, script sha256 differ across 4 ranks on 2 nodes"
    table = "\n".join(r.evidence)
    assert (
        "script sha256  5e5e5e5e5e5e on ranks 0-1 (node 0 (gpu-node-0)) | 777777777777 on "
        "ranks 2-3 (node 1 (gpu-node-1))" in table
    )
    assert "numpy: 2.1.3 -> 1.26.4; +wandb==0.17.0; -triton==3.0.0" in table


def test_package_diff_is_bounded():
    base = [f"p{i}==1" for i in range(30)]
    other = [f"p{i}==2" for i in range(30)]
    diff = package_diff(base, other)
    assert len(diff) == 11 and diff[-1] == "... 20 more"


# ---- stack.versions ---------------------------------------------------------------------


def test_versions_pass_with_a_matching_driver():
    r = versions_check([record(i, nvml=NVML_OK, device_count=8) for i in range(2)])
    assert r.status is Status.PASS
    assert "NVML driver 550.54.15 (CUDA 12.4), 8 GPUs visible" in "\n".join(r.evidence)


def test_driver_too_old_fails_with_both_numbers():
    old = dict(NVML_OK, driver_version="470.256.02", cuda_driver_version=11040)
    not_available = dict(VERSIONS, cuda_available=False, device_count=0)
    r = versions_check([record(i, nvml=old, versions=not_available) for i in range(2)])
    assert r.status is Status.FAIL
    assert ("driver 470.256.02 supports CUDA 11.4; torch was built for CUDA 12.4: torch cannot use the GPUs") in r.summary
    assert "torch.cuda.is_available() is False while NVML sees 8 GPUs" in r.summary


def test_cpu_build_on_gpu_host_and_count_mismatch():
    cpu = dict(VERSIONS, cuda=None, cuda_available=False, device_count=0, torch="2.4.1+cpu")
    r = versions_check([record(0, nvml=NVML_OK, versions=cpu)])
    assert r.status is Status.FAIL and "torch is a CPU-only build" in r.summary
    fewer = dict(VERSIONS, device_count=4)
    r = versions_check([record(0, nvml=NVML_OK, versions=fewer)])
    assert r.status is Status.WARN and "torch sees 4 GPUs, NVML 8" in r.summary


# ---- env.ranks --------------------------------------------------------------------------


def test_consistent_identities_pass():
    assert ranks_check([record(i, world=4) for i in range(4)]).status is Status.PASS


def test_duplicate_rank_and_local_rank_fail():
    recs = [record(0, world=4), record(1, world=4), record(2, world=4), record(2, world=4)]
    recs[3].env["LOCAL_RANK"] = "0"  # the same rank identity twice
    r = ranks_check(recs)
    assert r.status is Status.FAIL
    assert "RANK is not unique: [2]" in r.summary
    assert "LOCAL_RANK repeats on node 1 (gpu-node-1): [0, 0]" in r.summary


def test_world_size_and_master_port_must_agree():
    recs = [record(0), record(1, MASTER_PORT=29501, WORLD_SIZE=3)]
    r = ranks_check(recs)
    assert r.status is Status.FAIL
    assert "WORLD_SIZE differs between ranks: '2' on rank 0; '3' on rank 1" in r.summary
    assert "MASTER_PORT differs" in r.summary


def test_more_local_ranks_than_gpus_fails():
    two_gpus = dict(VERSIONS, device_count=2)
    recs = [record(i, world=4, per_node=4, versions=two_gpus) for i in range(4)]
    r = ranks_check(recs)
    assert r.status is Status.FAIL
    assert "4 ranks on node 0 (gpu-node-0) but only 2 GPUs visible to them" in r.summary
    # one GPU per rank through a per-rank CUDA_VISIBLE_DEVICES is fine
    one_each = dict(VERSIONS, device_count=1)
    recs = [record(i, world=2, versions=one_each, CUDA_VISIBLE_DEVICES=i) for i in range(2)]
    assert ranks_check(recs).status is Status.PASS


def test_script_joining_with_its_own_rank_numbers_fails():
    recs = [record(0, comm={"rank": 0, "world_size": 2}), record(1, comm={"rank": 0, "world_size": 2})]
    r = ranks_check(recs)
    assert r.status is Status.FAIL
    assert "rank 1 joined the process group as rank 0 of 2" in r.summary


# ---- bind.distinct ----------------------------------------------------------------------


def bound(index: int, current: int | None = None, model: int | None = None) -> dict:
    used = model if model is not None else (current if current is not None else index)
    return {
        "device_type": "cuda",
        "cuda_initialized": True,
        "current_device": current if current is not None else index,
        "model_device": model,
        "gpu": gpu(used),
        "basis": "current device",
    }


def test_distinct_gpus_pass_and_print_the_table():
    r = distinct_check([record(i, world=4, per_node=4, binding=bound(i)) for i in range(4)])
    assert r.status is Status.PASS and r.summary == "4 ranks on 4 different GPUs"
    assert r.evidence[0].split() == ["rank", "host", "node", "local", "device"]
    assert r.evidence[3].split()[:5] == ["2", "gpu-node-0", "0", "2", "cuda:2"]
    assert H100["devices"][2]["uuid"] in r.evidence[3]


def test_every_rank_on_cuda_0_fails_and_points_to_the_rules():
    recs = [record(i, world=4, per_node=4, binding=bound(0)) for i in range(4)]
    r = distinct_check(recs)
    assert r.status is Status.FAIL
    assert r.summary == (f"ranks 0-3 share GPU cuda:0 {H100['devices'][0]['uuid']} on node 0 (gpu-node-0)")
    assert "DDP101, DDP102, DDP103" in r.fix


def test_model_moved_to_its_gpu_without_set_device_counts_the_model_device():
    # model.to(f"cuda:{local_rank}") without set_device: current device is 0 everywhere
    recs = [record(i, binding=bound(i, current=0, model=i)) for i in range(2)]
    r = distinct_check(recs)
    assert r.status is Status.PASS
    assert "(current device cuda:0)" in r.evidence[2]


def test_cpu_ranks_skip_with_the_table():
    cpu = {"device_type": "cpu", "cuda_initialized": False, "cuda_available": False}
    r = distinct_check([record(i, binding=cpu) for i in range(2)])
    assert r.status is Status.SKIP and r.summary == "no GPU: the ranks run on CPU"
    assert len(r.evidence) == 3


# ---- comm.allreduce / comm.bandwidth ----------------------------------------------------


def smoke(rank, world=8, value=None, **extra):
    expected = world * (world + 1) / 2
    ar = {"ok": (value or expected) == expected, "value": value or expected, "expected": expected, "seconds": 0.002}
    return {"backend": "nccl", "rank": rank, "world_size": world, "device": f"cuda:{rank}", "allreduce": ar, **extra}


def test_allreduce_wrong_sum_and_stall_fail():
    recs = [record(i, world=8, per_node=8, comm=smoke(i)) for i in range(8)]
    assert allreduce_check(recs).status is Status.PASS
    recs[5] = record(5, world=8, per_node=8, comm=smoke(5, value=30.0))
    r = allreduce_check(recs)
    assert r.status is Status.FAIL
    assert "gave 30 on rank 5, expected W(W+1)/2 = 36" in r.summary
    recs[5] = record(
        5,
        world=8,
        per_node=8,
        comm={
            "backend": "nccl",
            "rank": 5,
            "world_size": 8,
            "device": "cuda:5",
            "allreduce": {
                "ok": False,
                "phase": "first collective",
                "seconds": 60.0,
                "error": "the first all_reduce gave no result within the audit's limit",
            },
            "stalled": True,
        },
    )
    log = "gpu-node-0:5:5 [5] NCCL INFO Channel 00/0 : 5[5] -> 6[6] via P2P/CUMEM\nother\n"
    r = allreduce_check(recs, log)
    assert r.summary.startswith("all_reduce stalled in the first collective on rank 5 after 60 s")
    assert "NCCL_DEBUG=INFO" in r.fix
    assert r.evidence[-1] == "last NCCL line: gpu-node-0:5:5 [5] NCCL INFO Channel 00/0 : 5[5] -> 6[6] via P2P/CUMEM"


def test_no_record_at_all_still_quotes_the_last_nccl_line():
    r = allreduce_check([], "x\nnode0:7:7 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.1<0>\n")
    assert r.status is Status.SKIP
    assert r.evidence == ["last NCCL line: node0:7:7 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.1<0>"]


def test_init_never_returned_fails_and_no_process_group_skips():
    recs = [record(0, comm=smoke(0, world=2)), record(1)]
    r = allreduce_check(recs)
    assert r.status is Status.FAIL
    assert r.summary == "rank 1 (node 0 (gpu-node-0)): init_process_group did not return"
    recs[1].init_called = False
    r = allreduce_check(recs)
    assert r.summary.startswith("rank 1 (node 0 (gpu-node-0)) never called init_process_group")
    none = [replace(record(i), init_called=False) for i in range(2)]
    assert allreduce_check(none).status is Status.SKIP


def test_an_init_that_raised_is_the_failures_not_a_stalled_communicator():
    """A worker whose init_process_group raised (its port taken) leaves no all_reduce anywhere:
    run.failure tells the error, and comm.allreduce does not blame NCCL."""
    raised = replace(record(0), status="raised")
    r = allreduce_check([raised, record(1)])
    assert (r.status, r.summary) == (Status.SKIP, "init_process_group raised on rank 0 (see run.failure)")
    r = allreduce_check([raised, record(1, comm=smoke(1, world=2))])  # another rank's group stood
    assert r.status is Status.FAIL


def nccl_sweep(world: int, peak_busbw: float) -> list[dict]:
    sizes = [1 << (10 + 2 * k) for k in range(10)]
    out = []
    for n in sizes:
        busbw = peak_busbw * min(1.0, n / (1 << 26))  # small messages are latency-bound
        algbw = busbw * world / (2 * (world - 1))
        out.append(bandwidth_row(n, n / (algbw * 1e9), world))
    return out


def test_h100_bandwidth_near_the_nvlink_limit_passes():
    recs = [record(i, world=8, per_node=8, nvml=NVML_OK, comm=smoke(i, sweep=nccl_sweep(8, 470.0))) for i in range(8)]
    r = bandwidth_check(recs)
    assert r.status is Status.PASS
    assert r.summary.startswith("all_reduce peak bus bandwidth 470.00 GB/s at 64.0 MiB over 8 ranks")
    assert "the links allow about 450 GB/s (NVLink 4.0 x18" in r.evidence[-1]


def test_bandwidth_far_below_the_links_warns():
    recs = [record(i, world=8, per_node=8, nvml=NVML_OK, comm=smoke(i, sweep=nccl_sweep(8, 60.0))) for i in range(8)]
    r = bandwidth_check(recs)
    assert r.status is Status.WARN
    assert "13% of the 450 GB/s the links allow" in r.summary
    assert "NCCL_P2P_DISABLE" in r.fix


def test_bandwidth_across_nodes_is_not_compared_with_nvlink():
    recs = [record(i, world=16, per_node=8, nvml=NVML_OK, comm=smoke(i, world=16, sweep=nccl_sweep(16, 40.0))) for i in range(16)]
    r = bandwidth_check(recs)
    assert r.status is Status.PASS and "network sets the limit" in r.evidence[-1]


# ---- mem.fit ----------------------------------------------------------------------------


def with_model(index: int, machine, total: int) -> dict:
    b = bound(index)
    b["gpu"] = gpu(index, machine)
    b["model"] = {
        "parameters": 10,
        "param_bytes": total // 5,
        "buffer_bytes": 0,
        "grad_bytes": total // 5,
        "bucket_bytes": total // 5,
        "optimizer_bytes": 2 * total // 5,
        "optimizers": ["AdamW"],
        "total_bytes": total,
        "notes": [],
    }
    return b


def test_model_state_against_the_smallest_gpu():
    mixed = json.loads((FIXTURES / "a100_pcie_mixed_40gb_80gb.json").read_text())
    # 7e9 parameters in bf16: 2 B each for weights, gradients and DDP buckets, 8 B of Adam state
    seven_b = 7_000_000_000 * (2 + 2 + 2 + 8)
    recs = [record(i, world=4, per_node=4, binding=with_model(i, mixed, seven_b)) for i in range(4)]
    r = fit_check(recs)
    assert r.status is Status.FAIL
    assert "does not fit the 40536 MiB GPU" in r.summary
    assert "FSDP" in r.fix and "ZeRO" in r.fix
    small = 30 * 2**30
    r = fit_check([record(i, world=4, per_node=4, binding=with_model(i, mixed, small)) for i in range(4)])
    assert r.status is Status.WARN and "76% of the smallest GPU" in r.summary
    r = fit_check([record(i, world=4, per_node=4, binding=with_model(i, mixed, 2**30)) for i in range(4)])
    assert r.status is Status.PASS


def test_no_ddp_model_skips():
    assert fit_check([record(0, binding=bound(0))]).status is Status.SKIP


def test_rank_checks_returns_every_verdict_as_json():
    recs = [record(i, nvml=NVML_OK, binding=bound(i), comm=smoke(i, world=2, sweep=nccl_sweep(2, 400.0))) for i in range(2)]
    results = rank_checks(recs)
    assert [r.check for r in results] == [
        "stack.versions",
        "stack.consistent",
        "env.ranks",
        "bind.distinct",
        "comm.allreduce",
        "comm.bandwidth",
        "mem.fit",
        "mem.peak",
    ]
    for r in results:
        json.dumps(r.to_json())


@pytest.mark.parametrize("key", ["info", "comm", "binding"])
def test_a_hook_that_raised_is_not_a_crash(key):
    recs = [record(i, binding=bound(i), comm=smoke(i, world=2)) for i in range(2)]
    setattr(recs[1], key, from_plain(type(getattr(recs[1], key)), {"error": "RuntimeError: boom"}))
    for r in rank_checks(recs):
        assert r.status in Status
