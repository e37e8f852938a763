"""The rank-side machine checks in a real audit: `python -m ddplint --runtime` runs a DDP script
under the real torchrun (gloo, 2 CPU processes) while a leftover torchrun of an earlier job is
still running. One audit serves every assertion."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddplint.runtime.checks.stale import find_stale

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = textwrap.dedent("""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(128, 64), torch.randn(128, 32))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DDP(torch.nn.Linear(64, 32))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()
""")


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def leftover(tmp_path_factory):
    """A torchrun agent and rank left over from an earlier job (not a child of this process)."""
    sleeper = tmp_path_factory.mktemp("leftover") / "earlier_job.py"
    sleeper.write_text("import time\ntime.sleep(120)\n")
    cmd = [sys.executable, str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc-per-node", "1", str(sleeper)]
    out = subprocess.run(
        ["sh", "-c", f"setsid {shlex.join(cmd)} >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True
    )
    agent = int(out.stdout)
    rank = None
    deadline = time.monotonic() + 60
    while rank is None and time.monotonic() < deadline:
        time.sleep(0.3)
        rank = next((p.pid for p, role in find_stale() if role.startswith("rank") and str(sleeper) in p.command), None)
    try:
        assert rank is not None, "the leftover torchrun did not start its rank"
        yield agent, rank
    finally:
        os.killpg(agent, signal.SIGKILL)
        if rank is not None:
            os.killpg(rank, signal.SIGKILL)


@pytest.fixture(scope="module")
def audit(tmp_path_factory, leftover):
    script = tmp_path_factory.mktemp("job") / "train_ddp.py"
    script.write_text(SCRIPT)
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--runtime", "--format", "json", "--steps", "4", str(script)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
        cwd=script.parent,
        check=False,
    )
    assert proc.stdout, proc.stderr
    report = json.loads(proc.stdout)
    return {c["check"]: c for c in report["checks"]}, report, proc


def test_every_machine_check_reports(audit):
    checks, _, _ = audit
    for name in (
        "gpu.inventory",
        "gpu.topology",
        "gpu.health",
        "stack.nvml",
        "env.port",
        "env.stale",
        "env.launch",
        "net.interconnect",
        "stack.versions",
        "stack.consistent",
        "env.ranks",
        "bind.distinct",
        "comm.allreduce",
        "comm.bandwidth",
        "mem.fit",
        "mem.peak",
    ):
        assert name in checks, name


def test_no_driver_skips_gpu_checks_and_runs_on_gloo(audit):
    checks, report, _ = audit
    if checks["gpu.inventory"]["status"] != "SKIP":
        pytest.skip("this machine has an NVIDIA driver")
    assert checks["gpu.inventory"]["summary"] == "NVML not available (no NVIDIA driver loaded)"
    assert report["launch"]["backend"] == "gloo"


def test_allreduce_smoke_sums_rank_plus_one(audit):
    checks, _, _ = audit
    ar = checks["comm.allreduce"]
    assert ar["status"] == "PASS"
    assert ar["summary"].startswith("all_reduce of rank+1 = 3 = W(W+1)/2 on ranks 0-1 (gloo, ")
    assert set(ar["data"]["seconds"]) == {"0", "1"}


def test_bandwidth_sweep_follows_nccl_tests_definitions_and_stays_fast(audit):
    bw = audit[0]["comm.bandwidth"]
    assert bw["status"] == "PASS"
    rows = bw["data"]["sweep"]
    assert [r["bytes"] for r in rows] == [1024, 16384, 262144, 4194304]
    for r in rows:
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (2 - 1) / 2)
    # 1 warm-up + 5 timed all_reduce per size: well under a second on CPU
    assert sum(r["seconds"] for r in rows) * 6 < 1.0
    assert "no GPU links to compare with" in bw["summary"]


def test_versions_and_consistency_across_ranks(audit):
    checks, _, _ = audit
    import torch

    assert checks["stack.versions"]["status"] == "PASS"
    assert checks["stack.versions"]["summary"].startswith(f"torch {torch.__version__}")
    assert checks["stack.consistent"]["status"] == "PASS"
    assert checks["stack.consistent"]["summary"].startswith("2 ranks on 1 node run the same script")


def test_rank_identities_and_the_rank_table(audit):
    checks, _, _ = audit
    ranks = checks["env.ranks"]
    assert ranks["status"] == "PASS"
    assert ranks["evidence"][0].startswith("rank 0: node 0 (")
    assert "LOCAL_RANK=1, WORLD_SIZE=2, LOCAL_WORLD_SIZE=2" in ranks["evidence"][1]
    bind = checks["bind.distinct"]
    assert bind["status"] == "SKIP" and bind["summary"] == "no GPU: the ranks run on CPU"
    assert bind["evidence"][0].split() == ["rank", "host", "node", "local", "device"]
    assert bind["evidence"][1].split()[0] == "0" and bind["evidence"][1].split()[-1] == "cpu"
    assert bind["evidence"][2].split()[0] == "1" and bind["evidence"][2].split()[3] == "1"


def test_model_state_estimate_of_the_ddp_model(audit):
    fit = audit[0]["mem.fit"]
    est = fit["data"]["estimate"]
    params = (64 * 32 + 32) * 4  # Linear(64, 32) in float32
    assert est["param_bytes"] == params
    assert est["grad_bytes"] == params and est["bucket_bytes"] == params
    assert est["optimizer_bytes"] == 2 * params  # Adam: exp_avg and exp_avg_sq
    assert est["optimizers"] == ["Adam"]
    assert est["total_bytes"] == 5 * params
    assert fit["status"] == "SKIP" and "no GPU to fit it on" in fit["summary"]
    peak = audit[0]["mem.peak"]  # measured, next to the estimate
    assert peak["status"] == "PASS" and peak["summary"].startswith("peak RSS ")
    assert peak["data"]["estimate_bytes"] == 5 * params
    assert f"mem.fit's estimate of the model state: {5 * params / 2**10:.1f} KiB per rank" in peak["evidence"]
    assert all(r["rss_peak_bytes"] > 50 * 2**20 for r in peak["data"]["ranks"])


def test_leftover_torchrun_is_reported_stale(audit, leftover):
    agent, rank = leftover
    stale = audit[0]["env.stale"]
    assert stale["status"] == "WARN"
    found = {p["pid"]: p["role"] for p in stale["data"]["processes"]}
    assert found.get(agent) == "torchrun agent" and found.get(rank) == "rank 0"
    assert str(agent) in stale["fix"]


HARDCODED_WORLD = textwrap.dedent("""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo", rank=0, world_size=1)  # left over from a one-GPU notebook
    model = DDP(torch.nn.Linear(4, 1))
    for x in torch.utils.data.DataLoader(torch.randn(32, 4), batch_size=4):
        model(x).sum().backward()
""")


def test_script_that_hard_codes_rank_and_world_size_fails_env_ranks(tmp_path):
    script = tmp_path / "notebook_port.py"
    script.write_text(HARDCODED_WORLD)
    proc = subprocess.run(
        [sys.executable, "-m", "ddplint", "--runtime", "--format", "json", "--steps", "2", "--timeout", "90", str(script)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=180,
        cwd=tmp_path,
        check=False,
    )
    checks = {c["check"]: c for c in json.loads(proc.stdout)["checks"]}
    ranks = checks["env.ranks"]
    assert ranks["status"] == "FAIL"
    assert "rank 1 joined the process group as rank 0 of 1" in ranks["summary"]
    assert ranks["fix"].startswith("call init_process_group() without rank/world_size")
    assert checks["comm.bandwidth"]["status"] == "SKIP"
    assert "rank 0's process group has 1 rank(s) but torchrun started 2" in checks["comm.allreduce"]["summary"]
    assert proc.returncode == 1
