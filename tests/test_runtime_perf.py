"""mem.peak, perf.steps and ckpt.resume in real audits: `python -m ddplint --runtime` runs small
DDP scripts under the real torchrun (gloo, 2 CPU processes). The scripts differ by far more than
the thresholds (a loader that sleeps 0.4 s per batch against steps of matmuls that wait well
under a millisecond for data; a rank that sleeps 0.5 s per step against ranks that sleep alike),
so the verdicts hold on a busy machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("torch")

from test_runtime_audit import report_schema

ROOT = Path(__file__).resolve().parent.parent

HEAD = """
import time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, TensorDataset
from torch.utils.data.distributed import DistributedSampler

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
"""

INPUT_BOUND = (
    HEAD
    + """
class Decoded(Dataset):  # every sample "decoded" in the training loop's own process
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.2)
        return torch.full((16,), float(i)), torch.zeros(4)

data = Decoded()
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=2, sampler=sampler)
model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if rank == 0:
        torch.save(model.state_dict(), "weights.pt")  # the model only: momentum is lost
"""
)

COMPUTE_BOUND = (
    HEAD
    + """
data = TensorDataset(torch.randn(256, 256), torch.randn(256, 256))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=16, sampler=sampler)
model = DDP(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
sched = torch.optim.lr_scheduler.StepLR(opt, 1)
w = torch.randn(256, 256) / 16
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        a = torch.randn(256, 256)
        for _ in range(30):
            a = torch.tanh(a @ w)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x + a[:16]), y).backward()
        opt.step()
    sched.step()
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "epoch": epoch}, "checkpoint.pt")
"""
)

DATA = (  # the training data of the scripts below: 8 batches of 8 per rank and epoch
    HEAD
    + """
data = TensorDataset(torch.randn(128, 16), torch.randn(128, 4))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=8, sampler=sampler)
"""
)
SLEEPY = (
    DATA
    + """
model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        time.sleep({sleep})
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
"""
)
DISTRIBUTED_CHECKPOINT = (
    DATA
    + """
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    model_sd, opt_sd = get_state_dict(model, opt)
    dcp.save({STATE}, checkpoint_id=f"ckpt/epoch_{epoch}")  # collective: every rank calls it
"""
)
TRAINER_DIRECTORY = (
    DATA
    + """
import json
import os
import random
import subprocess

model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
step = 0
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        step += 1
    out = f"out/checkpoint-{step}"
    os.makedirs(out, exist_ok=True)
    torch.save({"python": random.getstate(), "cpu": torch.get_rng_state()}, f"{out}/rng_state_{rank}.pth")
    if rank == 0:
        # the weights as save_pretrained writes them: safetensors, from native code (cp here)
        subprocess.run(["cp", os.environ["WEIGHTS"], f"{out}/model.safetensors"], check=True)
        {OPTIMIZER}
        with open(f"{out}/trainer_state.json", "w") as f:
            json.dump({"global_step": step, "epoch": float(epoch + 1)}, f)
"""
)
PARTS = (
    DATA
    + """
class SlowForward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 4)

    def forward(self, x):
        time.sleep(0.06)
        return self.lin(x)


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(0.08)
        return super().step(closure)


model = DDP(SlowForward())
opt = SlowSGD(model.parameters(), lr=0.01)
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        time.sleep(0.04)  # logging
dist.destroy_process_group()
"""
)
EVERY_N_STEPS = (
    DATA
    + """
model = DDP(torch.nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
step = 0
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        step += 1
        if step % 2 == 1 and rank == 0:
            torch.save({STATE}, "checkpoint.pt")
dist.destroy_process_group()
"""
)
STRAGGLER = SLEEPY.replace("{sleep}", "0.5 if rank == 1 else 0.0")
BALANCED = SLEEPY.replace("{sleep}", "0.1")


def audit(tmp_path: Path, name: str, source: str, *extra: str) -> dict[str, dict]:
    script = tmp_path / name
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--format",
            "json",
            "--output",
            str(out),
            "--steps",
            "5",
            "--epochs",
            "2",
            *extra,
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert out.exists(), proc.stderr
    report = json.loads(out.read_text())
    jsonschema.validate(report, report_schema())
    assert report["exit_code"] == 0, report["checks"]
    return {c["check"]: c for c in report["checks"]}


def order(checks: dict[str, dict]) -> list[str]:
    return [
        name for name in checks if name in ("mem.fit", "mem.peak", "io.single_writer", "ckpt.resume", "perf.steps", "run.failure")
    ]


def test_input_bound_loader_and_a_model_only_checkpoint(tmp_path):
    checks = audit(tmp_path, "input_bound.py", INPUT_BOUND)
    steps = checks["perf.steps"]
    assert steps["status"] == "WARN", steps
    assert steps["summary"].startswith("input-bound: rank ")
    assert "input_bound.py:" in steps["summary"]
    assert "num_workers=4" in steps["fix"] and "(now num_workers=0)" in steps["fix"]
    for r in steps["data"]["ranks"]:
        assert r["steps"] == 8  # 2 epochs x 5 steps, the first of each epoch left out
        assert r["wait_share"] > 0.6  # two samples of 0.2 s per batch; the threshold is 0.3
        assert r["wait_s"] >= 0.38
    resume = checks["ckpt.resume"]
    assert resume["status"] == "WARN", resume
    assert resume["summary"].startswith("a resume from weights.pt would miss: no optimizer state: SGD keeps")
    assert "missing: no epoch/step counter: a resume starts again at epoch 0" in resume["evidence"]
    [ckpt] = resume["data"]["checkpoints"]
    assert ckpt["rank"] == 0 and ckpt["model"] == "checkpoint" and ckpt["model_tensors"] == 2
    assert ckpt["module_prefix"] and ckpt["optimizer"] is None
    assert resume["data"]["live"]["optimizers"] == [{"kind": "SGD", "stateful": True}]
    assert order(checks) == ["mem.fit", "mem.peak", "io.single_writer", "ckpt.resume", "perf.steps", "run.failure"]


def test_compute_bound_steps_and_a_full_checkpoint(tmp_path):
    checks = audit(tmp_path, "compute_bound.py", COMPUTE_BOUND)
    steps = checks["perf.steps"]
    assert "input-bound" not in steps["summary"], steps
    for r in steps["data"]["ranks"]:
        assert r["steps"] == 8 and r["comm_s"] is not None
        assert r["wait_share"] < 0.06  # a TensorDataset batch against 30 matmuls of 256x256
    if steps["status"] == "PASS":
        assert steps["summary"].startswith("median step ") and "waiting for data " in steps["summary"]
    resume = checks["ckpt.resume"]
    assert resume["status"] == "PASS", resume
    assert resume["summary"] == (
        "checkpoint.pt holds what a resume needs: model, optimizer, scheduler, "
        "checkpoint['epoch'] (no RNG state: a resume draws different random numbers)"
    )
    [ckpt] = resume["data"]["checkpoints"]
    assert ckpt["counters"] == {"checkpoint['epoch']": 1}  # saved after epochs 0 and 1
    assert ckpt["optimizer_state_entries"] == 2 and not ckpt["module_prefix"]
    peak = checks["mem.peak"]
    assert (
        peak["status"] == "PASS"
        and peak["summary"].endswith("per rank (rank 0), on CPU")
        or peak["summary"].endswith("per rank (rank 1), on CPU")
    )
    for r in peak["data"]["ranks"]:
        assert r["rss_peak_bytes"] >= r["rss_at_first_batch_bytes"] > 50 * 2**20  # torch is loaded
        assert r["device"] is None


def test_a_rank_with_extra_work_per_step_is_the_straggler(tmp_path):
    checks = audit(tmp_path, "straggler.py", STRAGGLER)
    steps = checks["perf.steps"]
    assert steps["status"] == "WARN", steps
    assert steps["summary"].startswith("straggler: rank 1 works "), steps["summary"]
    ranks = {r["rank"]: r for r in steps["data"]["ranks"]}
    assert ranks[1]["own_s"] >= 0.45 and ranks[1]["own_s"] > 5 * ranks[0]["own_s"]
    assert ranks[0]["comm_s"] >= 0.4  # rank 0 waits for rank 1 in the gradient all_reduce
    assert steps["data"]["straggler"] == 1
    assert checks["ckpt.resume"]["status"] == "SKIP"


def test_balanced_ranks_pass(tmp_path):
    checks = audit(tmp_path, "balanced.py", BALANCED)
    steps = checks["perf.steps"]
    assert steps["status"] == "PASS", steps
    ranks = steps["data"]["ranks"]
    own = [r["own_s"] for r in ranks]
    assert min(own) >= 0.09 and max(own) < 1.3 * min(own)  # both sleep 0.1 s per step
    assert steps["data"]["slowest_ratio"] < 1.3
    assert "straggler" not in steps["data"]
    assert checks["perf.scaling"]["status"] == "SKIP"  # not asked for


def test_the_step_is_split_into_forward_backward_optimizer_and_the_rest(tmp_path):
    checks = audit(tmp_path, "parts.py", PARTS)
    steps = checks["perf.steps"]
    assert steps["status"] == "PASS", steps
    assert "forward+backward " in steps["summary"] and "optimizer " in steps["summary"], steps["summary"]
    for r in steps["data"]["ranks"]:
        # the forward sleeps 60 ms, the optimizer step 80 ms, the loop 40 ms after it: each lands in its part
        assert r["forward_backward_s"] >= 0.055, r
        assert r["optimizer_s"] >= 0.075, r
        assert r["other_s"] >= 0.035, r
        assert r["wait_s"] < 0.03, r
    assert steps["evidence"][0].startswith("rank 0: step ") and ", optimizer " in steps["evidence"][0]


def test_a_checkpoint_saved_every_few_steps_needs_its_step(tmp_path):
    epoch_only = '{"model": model.module.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}'
    resume = audit(tmp_path, "every_n_steps.py", EVERY_N_STEPS.replace("{STATE}", epoch_only))["ckpt.resume"]
    assert resume["status"] == "WARN", resume
    # saves at steps 1, 3, ..., 9: the last after batch 4 of the 5 epoch 1 gets under --steps 5
    assert resume["summary"] == (
        "a resume from checkpoint.pt would miss: no position in the epoch: saved after batch 4 of epoch 1 "
        "with an epoch counter only, a resume starts that epoch again from its first batch (or skips the rest of it)"
    )
    with_step = epoch_only.replace('"epoch": epoch}', '"epoch": epoch, "step": step}')
    twin = audit(tmp_path, "every_n_steps_twin.py", EVERY_N_STEPS.replace("{STATE}", with_step))["ckpt.resume"]
    assert twin["status"] == "PASS", twin


def test_a_distributed_checkpoint_is_read_back_once_and_is_no_shared_write(tmp_path):
    source = DISTRIBUTED_CHECKPOINT.replace("{STATE}", '{"model": model_sd, "optimizer": opt_sd, "epoch": epoch}')
    checks = audit(tmp_path, "dcp_full.py", source)
    resume = checks["ckpt.resume"]
    assert resume["status"] == "PASS", resume
    assert resume["summary"] == (
        "ckpt/epoch_1 holds what a resume needs: model, optimizer, checkpoint['epoch'] "
        "(no RNG state: a resume draws different random numbers)"
    )
    assert [(c["path"], c["rank"]) for c in resume["data"]["checkpoints"]] == [
        (str(tmp_path / "ckpt" / "epoch_0"), 0),
        (str(tmp_path / "ckpt" / "epoch_1"), 0),
    ]  # one checkpoint each, read by the coordinator, though every rank saved it
    assert resume["data"]["checkpoints"][1]["optimizer_state_entries"] == 2
    writer = checks["io.single_writer"]
    assert writer["status"] == "PASS" and writer["summary"] == "the script wrote only collective checkpoints"
    assert writer["evidence"][0] == (
        "ckpt/epoch_0: ranks 0, 1 (dcp.save at dcp_full.py:29): a collective save, each rank writes its own shard"
    )


def test_a_model_only_distributed_checkpoint_warns(tmp_path):
    checks = audit(tmp_path, "dcp_model.py", DISTRIBUTED_CHECKPOINT.replace("{STATE}", '{"model": model_sd}'))
    resume = checks["ckpt.resume"]
    assert resume["status"] == "WARN", resume
    assert resume["summary"] == (
        "a resume from ckpt/epoch_0 would miss: no optimizer state: AdamW keeps per-parameter state "
        "(momentum, moments) that a resume restarts from zero (+1 more)"
    )
    assert "dcp.save(" in resume["fix"]


def weights_file(tmp_path: Path) -> Path:
    """safetensors weights of a Linear(16, 4), laid out by hand (the header names the tensors)."""
    header = {"weight": {"dtype": "F32", "shape": [4, 16], "data_offsets": [0, 256]}}
    header["bias"] = {"dtype": "F32", "shape": [4], "data_offsets": [256, 272]}
    raw = json.dumps(header).encode()
    path = tmp_path / "weights.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(272))
    return path


@pytest.mark.parametrize("optimizer", [True, False])
def test_a_trainer_checkpoint_directory_is_judged_as_one(tmp_path, optimizer, monkeypatch):
    """save_pretrained weights (unseen by the probe), optimizer.pt, the step in a JSON file and
    every rank's RNG state, in one directory: one checkpoint, complete only with the optimizer."""
    monkeypatch.setenv("WEIGHTS", str(weights_file(tmp_path)))
    line = 'torch.save(opt.state_dict(), f"{out}/optimizer.pt")' if optimizer else "pass"
    checks = audit(tmp_path, "trainer_dir.py", TRAINER_DIRECTORY.replace("{OPTIMIZER}", line))
    resume = checks["ckpt.resume"]
    first, last = "out/checkpoint-5", "out/checkpoint-10"  # --epochs 2 --steps 5: two epochs of 5 steps
    if optimizer:
        assert resume["status"] == "PASS", resume
        assert resume["summary"] == f"{last} holds what a resume needs: model, optimizer, trainer_state.json['global_step']"
    else:
        assert resume["status"] == "WARN", resume
        assert resume["summary"].startswith(f"a resume from {first} would miss: no optimizer state: AdamW keeps")
    joined = [c for c in resume["data"]["checkpoints"] if c["path"] == str(tmp_path / last)]
    assert len(joined) == 1 and joined[0]["model"] == "model.safetensors" and joined[0]["model_tensors"] == 2
    assert {"model.safetensors", "trainer_state.json", "rng_state_0.pth", "rng_state_1.pth"} <= set(joined[0]["parts"])
    assert joined[0]["rng"]  # each rank's RNG state, recognised by its shape


def test_scaling_runs_the_steps_again_with_one_process(tmp_path):
    checks = audit(tmp_path, "balanced.py", BALANCED, "--scaling")
    scaling = checks["perf.scaling"]
    assert scaling["status"] == "INFO", scaling  # on the CPU: information only
    data = scaling["data"]
    assert data["unit"] == "samples/s" and data["batch_size"] == 8
    # every step sleeps 0.1 s, so throughput is about 80 samples/s per process whatever the load
    assert 40 < data["processes"]["1"] < 85 and 1.4 < data["speedup"] < 2.1, data
    assert scaling["summary"].startswith("2 processes: ") and "scaling efficiency" in scaling["summary"]


ATOMIC_SAVE = (
    HEAD
    + """
import dataclasses
import os
import pickle

@dataclasses.dataclass
class Config:  # pickled as __main__.Config: read back in the script's own module
    lr: float = 0.01

data = TensorDataset(torch.randn(64, 8), torch.randn(64, 2))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = DDP(torch.nn.Linear(8, 2))
opt = torch.optim.Adam(model.parameters(), lr=Config().lr)
for epoch in range(5):
    sampler.set_epoch(epoch)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if rank == 0:
        os.makedirs("out", exist_ok=True)
        torch.save({"model": model.module.state_dict(), "optimizer": opt.state_dict(),
                    "global_step": (epoch + 1) * len(loader), "config": Config()}, "out/last.pt.tmp")
        os.replace("out/last.pt.tmp", "out/last.pt")  # atomic: a crash never leaves half a file
        with open("out/metrics.pkl", "wb") as f:
            pickle.dump({"epoch": epoch, "loss": 0.5}, f)  # named like a checkpoint, but is not one
"""
)


def test_atomic_save_read_back_without_the_sandbox(tmp_path):
    """Without the sandbox the rank reads its redirected copy; the checkpoint renamed into place
    is the one judged, and its class from the script unpickles."""
    script = tmp_path / "atomic.py"
    script.write_text(textwrap.dedent(ATOMIC_SAVE))
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ddplint",
            "--runtime",
            "--no-sandbox",
            "--format",
            "json",
            "--output",
            str(out),
            "--steps",
            "3",
            "--epochs",
            "2",
            str(script),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert out.exists(), proc.stderr
    resume = next(c for c in json.loads(out.read_text())["checks"] if c["check"] == "ckpt.resume")
    assert resume["status"] == "PASS", resume
    assert resume["summary"] == (
        "out/last.pt holds what a resume needs: model, optimizer, "
        "checkpoint['global_step'] (no RNG state: a resume draws different random numbers)"
    )
    [ckpt] = resume["data"]["checkpoints"]
    assert ckpt["path"] == str(tmp_path / "out" / "last.pt") and ckpt["error"] is None
    assert ckpt["counters"] == {"checkpoint['global_step']": 8}  # 2 epochs x 4 batches
    assert ckpt["optimizer_groups"] == ["betas"] and ckpt["optimizer_state_entries"] == 2
    assert "config" in ckpt["keys"]
    assert resume["data"]["live"]["optimizers"] == [{"kind": "Adam", "stateful": True}]
    assert not (tmp_path / "out").exists()  # redirected into the run's scratch, now gone
