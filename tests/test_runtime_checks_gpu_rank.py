"""The rank side of the GPU checks without a GPU: which device the NCCL test uses, bounded
collectives (a real gloo group whose peer never joins), where a rank's model really lives,
NCCL's refusal of two ranks on one GPU, and a torch without NCCL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ddplint.runtime.checks import binding, comm
from ddplint.runtime.checks.binding import distinct_check, uuid_label
from ddplint.runtime.checks.comm import allreduce_check, error_line
from ddplint.runtime.checks.ports import free_port
from ddplint.runtime.records import RankRecord
from ddplint.runtime.verdict import Status

ROOT = Path(__file__).resolve().parent.parent
NCCL_DUPLICATE = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, invalid "
    "usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Last error:\nDuplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"
)


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda answering as on a 4-GPU host (nothing here launches a kernel)."""
    state = types.SimpleNamespace(current=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state.current)
    return state


def test_the_nccl_test_runs_on_the_device_the_script_bound(fake_cuda, monkeypatch):
    import torch.distributed as dist

    group = types.SimpleNamespace(bound_device_id=torch.device("cuda", 3))
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: group)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert comm.comm_device("nccl") == torch.device("cuda", 3)  # init_process_group(device_id=3)
    group.bound_device_id = None
    fake_cuda.current = 2
    assert comm.comm_device("nccl") == torch.device("cuda", 2)  # set_device(2)
    fake_cuda.current = 0
    assert comm.comm_device("nccl") == torch.device("cuda", 1)  # nothing bound: LOCAL_RANK
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert comm.comm_device("nccl") == torch.device("cuda", 0)
    assert comm.comm_device("gloo") == torch.device("cpu")


class _Pending:
    def is_completed(self):
        return False

    def wait(self):
        raise AssertionError("a pending work is never waited on")


def test_waiting_on_a_collective_that_never_completes_ends_at_the_deadline():
    start = time.monotonic()
    with pytest.raises(comm.CollectiveTimeout, match="the first all_reduce gave no result"):
        comm.wait_all([_Pending()], time.monotonic() + 0.5, "the first all_reduce")
    assert time.monotonic() - start >= 0.5


def test_a_real_gloo_all_reduce_whose_peer_never_joins_is_reported_as_a_stall(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(
        textwrap.dedent("""
        import json, os, sys, time
        import torch.distributed as dist
        from ddplint.runtime.checks import comm
        dist.init_process_group("gloo")
        if dist.get_rank() == 1:
            time.sleep(float(sys.argv[1]))  # never joins ddplint's all_reduce
        else:
            comm.SMOKE_TIMEOUT_S = 2.0
            print(json.dumps(comm.measure()), flush=True)
        os._exit(0)
    """)
    )
    port = free_port()
    procs = []
    for rank in (0, 1):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            LOCAL_RANK=str(rank),
            PYTHONPATH=str(ROOT),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), "60"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    try:
        out, err = procs[0].communicate(timeout=120)
    finally:
        procs[1].kill()
        procs[1].wait()
    result = json.loads(out)
    assert result["stalled"] is True, err
    ar = result["allreduce"]
    assert ar["ok"] is False and ar["phase"] == "first collective"
    assert ar["error"] == "the first all_reduce gave no result within the audit's limit"
    assert 2.0 <= ar["seconds"] < 50
    r = allreduce_check([RankRecord.from_plain({"rank": 0, "init_called": True, "comm": result})])
    assert r.status is Status.FAIL
    assert r.summary.startswith("all_reduce stalled in the first collective on rank 0 after")
    assert "NCCL_DEBUG=INFO" in r.fix


def _module(*devices):
    params = [types.SimpleNamespace(device=torch.device(*d)) for d in devices]
    return types.SimpleNamespace(parameters=lambda recurse=True: iter(params))


def _binding(fake_cuda, monkeypatch, models, modules, tensors):
    monkeypatch.setattr(
        binding, "_describe", lambda i: {"index": i, "name": "NVIDIA A100-SXM4-80GB", "uuid": f"GPU-{i:08d}", "pci_bus_id": None}
    )
    return binding.binding_info(models, modules, tensors)


def test_binding_is_read_where_the_parameters_live_not_from_the_current_device(fake_cuda, monkeypatch):
    # FSDP or a hand-reduced model placed with torch.device("cuda", local_rank), no set_device:
    # the current device stays 0 on every rank
    records = []
    for rank in range(2):
        info = _binding(fake_cuda, monkeypatch, [], [_module(("cuda", rank))], [])
        assert info["basis"] == "model parameters" and info["current_device"] == 0
        records.append(RankRecord.from_plain({"rank": rank, "binding": info, "info": {"env": {"LOCAL_RANK": str(rank)}}}))
    r = distinct_check(records)
    assert r.status is Status.PASS, r.summary
    assert "cuda:1 NVIDIA A100-SXM4-80GB GPU-00000001 (current device cuda:0)" in r.evidence[2]
    # a DDP model decides over other modules; live CUDA tensors only when no module is on a GPU
    info = _binding(fake_cuda, monkeypatch, [_module(("cuda", 3))], [_module(("cuda", 0))], [])
    assert (info["basis"], info["gpu"]["index"]) == ("DDP model", 3)
    tensors = [types.SimpleNamespace(device=torch.device("cuda", 2))] * 2 + [types.SimpleNamespace(device=torch.device("cpu"))]
    info = _binding(fake_cuda, monkeypatch, [], [_module(("cpu",))], tensors)
    assert (info["basis"], info["gpu"]["index"]) == ("CUDA tensors", 2)
    nothing = _binding(fake_cuda, monkeypatch, [], [], [])
    assert "gpu" not in nothing and nothing["basis"] == "no tensor on a GPU yet"


def test_ranks_really_sharing_a_gpu_still_fail(fake_cuda, monkeypatch):
    records = [
        RankRecord.from_plain(
            {
                "rank": r,
                "binding": _binding(fake_cuda, monkeypatch, [_module(("cuda", 0))], [], []),
                "info": {"env": {"LOCAL_RANK": str(r)}},
            }
        )
        for r in range(2)
    ]
    r = distinct_check(records)
    assert r.status is Status.FAIL and r.rule == "DDP101"
    assert r.summary.startswith("ranks 0-1 share GPU cuda:0 GPU-00000000")


def test_nccl_duplicate_gpu_in_ddp_construction_is_the_binding_failure():
    records = [
        {"rank": 0, "status": "terminated", "binding": {}},
        {
            "rank": 1,
            "status": "raised",
            "binding": {},
            "error": {
                "type": "DistBackendError",
                "message": "DistBackendError: NCCL error in: ...",
                "text": "Traceback (most recent call last):\n  ...\ntorch.distributed.DistBackendError: " + NCCL_DUPLICATE,
                "t": 1.0,
            },
        },
    ]
    r = distinct_check([RankRecord.from_plain(rec) for rec in records])
    assert r.status is Status.FAIL and r.rule == "DDP101"
    assert r.summary == ("ranks 0-1 share the GPU at PCI 0000:1a:00.0: NCCL refused them (Duplicate GPU detected)")
    assert r.fix.startswith("bind each rank before building the model: torch.cuda.set_device(")
    assert r.evidence[-1] == ("NCCL: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000")


def test_the_same_refusal_in_ddplints_own_nccl_test_is_recognised():
    line = error_line(RuntimeError(NCCL_DUPLICATE))
    assert line == "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000"
    assert error_line(RuntimeError("Connection reset by peer\nmore")) == "Connection reset by peer"
    records = [
        RankRecord.from_plain(
            {
                "rank": r,
                "init_called": True,
                "binding": {},
                "comm": {"allreduce": {"ok": False, "phase": "first collective", "seconds": 0.3, "error": line}},
            }
        )
        for r in range(2)
    ]
    assert distinct_check(records).status is Status.FAIL
    assert allreduce_check(records).summary.startswith(
        "all_reduce failed in the first collective on rank 0 after 0.3 s: Duplicate GPU detected"
    )


def test_a_torch_without_nccl_is_named_as_such(tmp_path):
    import torch.distributed as dist

    if dist.is_nccl_available():
        pytest.skip("this torch has NCCL")
    # the real refusal of this CPU build of torch
    store = dist.FileStore(str(tmp_path / "store"), 1)
    with pytest.raises(RuntimeError) as raised:
        dist.init_process_group("nccl", store=store, rank=0, world_size=1)
    text = f"Traceback ...\n{type(raised.value).__name__}: {raised.value}"
    record = {
        "rank": 0,
        "node": "node-a",
        "init_called": True,
        "status": "raised",
        "backend": {"requested": "nccl", "forced": "nccl"},
        "error": {"type": type(raised.value).__name__, "message": text.splitlines()[-1], "text": text, "t": 1.0},
        "info": {"versions": {"torch": str(torch.__version__), "nccl_available": False}},
    }
    r = allreduce_check([RankRecord.from_plain(record)])
    assert r.status is Status.FAIL
    assert r.summary == (
        f"rank 0 (node-a): this torch build has no NCCL (torch {torch.__version__}), so the nccl backend cannot start"
    )
    assert "Distributed package doesn't have NCCL built in" in text
    assert r.fix.startswith("use --backend gloo")


@pytest.mark.parametrize(
    "raw,name,cvd,label",
    [
        (
            "c07e1d95-2a48-5f63-b9e0-3d7a1c5f8e24",
            "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
            None,
            "MIG-c07e1d95-2a48-5f63-b9e0-3d7a1c5f8e24",
        ),
        (
            "c07e1d95-2a48-5f63-b9e0-3d7a1c5f8e24",
            "NVIDIA A100-SXM4-40GB",
            "MIG-c07e1d95",
            "MIG-c07e1d95-2a48-5f63-b9e0-3d7a1c5f8e24",
        ),
        ("5f6e7d8c-9b0a-1c2d-3e4f-50617283a4b5", "NVIDIA A100-SXM4-40GB", "0", "GPU-5f6e7d8c-9b0a-1c2d-3e4f-50617283a4b5"),
        ("GPU-5f6e7d8c", "x", None, "GPU-5f6e7d8c"),
        ("", "x", None, ""),
    ],
)
def test_a_mig_instance_uuid_is_labelled_mig(raw, name, cvd, label):
    assert uuid_label(raw, name, cvd) == label


STALL_SCRIPT = textwrap.dedent("""
    import os, time
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler
    from ddplint.runtime.checks import comm, rank as rank_checks

    # test rig: ddplint's collectives wait 3 s, and rank 1 joins them only after 8 s
    comm.SMOKE_TIMEOUT_S = comm.SWEEP_TIMEOUT_S = 3.0
    if os.environ["RANK"] == "1":
        real = rank_checks.measure
        rank_checks.measure = lambda *phase: (time.sleep(8), real(*phase))[1]
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4))
    for (x,) in DataLoader(data, batch_size=8, sampler=DistributedSampler(data)):
        dist.all_reduce(x)  # the script's own collective: it would hang after the stall
""")


def test_a_stalled_first_collective_stops_the_script_and_is_reported_in_a_real_audit(tmp_path):
    (tmp_path / "train.py").write_text(STALL_SCRIPT)
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--runtime", "--timeout", "120", "--format", "json", "--output", str(out), "train.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    wall = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    report = json.loads(out.read_text())
    checks = {c["check"]: c for c in report["checks"]}
    ar = checks["comm.allreduce"]
    assert ar["status"] == "FAIL"
    assert ar["summary"].startswith("all_reduce stalled in the first collective on rank 0 after ")
    # rank 0's abandoned all_reduce still completes when rank 1 comes; rank 1 then stalls in
    # the sweep, which rank 0 has left
    bw = checks["comm.bandwidth"]
    assert (bw["status"], bw["summary"]) == ("FAIL", "the bandwidth sweep stalled (no result within the audit's limit) on rank 1")
    assert [r["status"] for r in report["ranks"]] == ["stopped", "stopped"]
    assert checks["run.hang"]["status"] == "PASS"  # stopped by the probe, not by --timeout
    assert wall < 90, wall  # not the 60 s limits, nor --timeout


SETUP_STALL_SCRIPT = textwrap.dedent("""
    import os, time
    import torch, torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
    from ddplint.runtime.checks import comm, rank as rank_checks
    # test rig: rank 1 never gets through the first collective, as a rank whose NCCL
    # communicator setup blocks inside it; rank 0 waits for it longer than the audit's limit
    comm.SMOKE_TIMEOUT_S = 300.0
    if os.environ["RANK"] == "1":
        rank_checks.measure = lambda *phase: time.sleep(300)
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4))
    for (x,) in DataLoader(data, batch_size=8, sampler=DistributedSampler(data)):
        dist.all_reduce(x)
""")


def test_a_first_collective_that_never_completes_is_a_communicator_setup_stall(tmp_path):
    (tmp_path / "train.py").write_text(SETUP_STALL_SCRIPT)
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--timeout",
            "200",
            "--rdzv-timeout",
            "20",
            "--format",
            "json",
            "--output",
            str(out),
            "train.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    wall = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    hang = {c["check"]: c for c in json.loads(out.read_text())["checks"]}["run.hang"]
    assert hang["status"] == "FAIL"
    assert hang["summary"] == (
        "stalled in communicator setup: the first collective after init_process_group did not complete within 20 s"
    )
    assert hang["data"]["reason"] == "comm setup"
    assert any(e.startswith(("NCCL's last line", "NCCL said nothing")) for e in hang["evidence"])
    assert wall < 150, wall  # the rendezvous limit, not --timeout


def test_a_tensor_that_refuses_its_device_is_ignored():
    class Refuses:
        @property
        def device(self):
            raise RuntimeError("no device for a fake tensor")

    tensors = [Refuses(), types.SimpleNamespace(device=torch.device("cuda", 1))]
    assert binding.cuda_indices(tensors) == {1: 1}
