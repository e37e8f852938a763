"""Cost of the runtime audit, measured against baselines in the same run.

1. Wall time of `ddplint --runtime` on fixtures/runtime/correct.py (2 ranks, gloo, CPU) against
   a bare `torchrun --standalone --nproc_per_node 2` all_reduce smoke script; target ratio <= 1.5.
   And the audit of a plain DDP training script against a bare torchrun of the same steps;
   target ratio <= 1.3.
2. Time of the full-epoch index audit (data.disjoint / data.coverage counting) for datasets of
   1e5, 1e6 and 1e7 samples over 8 simulated ranks, sharded like DistributedSampler(shuffle=True)
   and unsharded (every rank reads everything: the overlap path); target: linear growth,
   under 5 s at 1e7.

Usage: python bench/runtime_overhead.py [--repeat 3] [--skip-launch]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddplint.runtime.checks.data import audit_indices  # noqa: E402

SMOKE = """
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
dist.all_reduce(t)
assert t.item() == dist.get_world_size() * (dist.get_world_size() + 1) / 2
dist.destroy_process_group()
"""


TRAIN = """
import sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
epochs, steps = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(4096, 512), torch.randn(4096, 512))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=64, sampler=sampler)
model = DDP(torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512)))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for epoch in range(epochs):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        if i == steps:
            break
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
dist.destroy_process_group()
"""


def timed(cmd: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed


def paired(repeat: int, work: Path, bare: list[str], audit: list[str], labels: tuple[str, str], target: float) -> None:
    """Run the bare command and the audit in turns (so that load changes hit both alike) and
    print their medians and ratio."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    bares, audits = [], []
    for _ in range(repeat):
        bares.append(timed(bare, work, env))
        audits.append(timed(audit, work, env))
    b, a = statistics.median(bares), statistics.median(audits)
    width = max(map(len, labels))
    print(f"{labels[0]:<{width}}  median {b:.2f} s  runs {[round(x, 2) for x in bares]}")
    print(f"{labels[1]:<{width}}  median {a:.2f} s  runs {[round(x, 2) for x in audits]}")
    print(f"ratio audit / bare: {a / b:.2f}x (target <= {target}x)")


def launch_overhead(repeat: int) -> None:
    """The audit of fixtures/runtime/correct.py against a bare torchrun all_reduce smoke script."""
    work = Path(tempfile.mkdtemp(prefix="ddplint-bench-"))
    try:
        shutil.copy(ROOT / "fixtures" / "runtime" / "correct.py", work / "correct.py")
        (work / "smoke.py").write_text(SMOKE)
        report = str(work / "report.json")
        audit = [sys.executable, "-m", "ddplint", "--runtime", "--format", "json", "--output", report, "correct.py"]
        bare = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "smoke.py"]
        labels = ("bare torchrun all_reduce smoke (2 ranks):", "ddplint --runtime correct.py (2 ranks):")
        paired(repeat, work, bare, audit, labels, 1.5)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def training_overhead(repeat: int) -> None:
    """The audit of a plain DDP training script against a bare torchrun of the same steps (2
    epochs of 8 batches: the audit's default cut, given to the bare run as arguments)."""
    work = Path(tempfile.mkdtemp(prefix="ddplint-bench-"))
    try:
        (work / "train.py").write_text(TRAIN)
        report = str(work / "report.json")
        audit = [sys.executable, "-m", "ddplint", "--runtime", "--format", "json", "--output", report, "train.py", "2", "8"]
        bare = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "train.py", "2", "8"]
        labels = ("bare torchrun of train.py, 2 epochs x 8 steps (2 ranks):", "ddplint --runtime of the same steps (2 ranks):")
        paired(repeat, work, bare, audit, labels, 1.3)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def simulated_ranks(n: int, world: int, sharded: bool, rng) -> dict[int, np.ndarray]:
    perm = rng.permutation(n)
    if not sharded:
        return {r: perm for r in range(world)}
    total = -(-n // world) * world
    padded = np.concatenate([perm, perm[: total - n]])
    return {r: padded[r::world] for r in range(world)}


def index_audit(repeat: int) -> None:
    rng = np.random.default_rng(0)
    world = 8
    for sharded in (True, False):
        label = "sharded (DistributedSampler)" if sharded else "unsharded (overlap path)"
        times = []
        for n in (10**5, 10**6, 10**7):
            ranks = simulated_ranks(n, world, sharded, rng)
            runs = []
            for _ in range(repeat):
                start = time.perf_counter()
                audit = audit_indices(ranks, n)
                runs.append(time.perf_counter() - start)
            times.append(statistics.median(runs))
            print(
                f"index audit, {label}, n={n:>9,} x {world} ranks: {times[-1]:.3f} s "
                f"(duplicates {audit.duplicates:,}, covered {audit.covered:,})"
            )
        print(
            f"  growth per 10x samples: {times[1] / times[0]:.1f}x, {times[2] / times[1]:.1f}x "
            f"(linear = 10x); 1e7 under 5 s: {'yes' if times[2] < 5 else 'NO'}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-launch", action="store_true", help="only the index audit")
    args = parser.parse_args()
    if not args.skip_launch:
        launch_overhead(args.repeat)
        training_overhead(args.repeat)
    index_audit(args.repeat)


if __name__ == "__main__":
    main()
