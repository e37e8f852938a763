"""Cost of the machine checks, against baselines measured in the same run.

1. Host checks (`run_host_checks`, before torchrun starts) on this machine and on the replayed
   8x H100 inventory, against the time of `python -c "import torch"` (what every rank pays
   anyway); target: under 10% of it.
2. Rank hooks inside a real 2-rank gloo torchrun: collect_rank_info, after_init_process_group
   (all_reduce smoke test + bandwidth sweep) and at_first_batch, each timed in the rank, and
   the end-to-end torchrun time of a tiny DDP script with and without the hooks; target:
   hooks under 1 s in total and an end-to-end ratio under 1.3.

Usage: python bench/machine_checks.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import median_time  # noqa: E402

from ddplint.runtime.checks.host import run_host_checks  # noqa: E402
from ddplint.runtime.checks.ports import free_port  # noqa: E402
from ddplint.runtime.nvml import ReplayReads  # noqa: E402
from ddplint.runtime.options import RuntimeOptions  # noqa: E402

SCRIPT = """
import json, os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
HOOKS = sys.argv[1] == "hooks"
if HOOKS:
    from ddplint.runtime.checks import rank as hooks
    t = time.perf_counter(); hooks.collect_rank_info(); info_s = time.perf_counter() - t
dist.init_process_group("gloo")
if HOOKS:
    t = time.perf_counter(); hooks.after_init_process_group(); comm_s = time.perf_counter() - t
model = DDP(torch.nn.Linear(256, 256))
opt = torch.optim.Adam(model.parameters())
x = torch.randn(32, 256)
if HOOKS:
    t = time.perf_counter(); hooks.at_first_batch(); batch_s = time.perf_counter() - t
model(x).sum().backward()
opt.step()
if HOOKS and dist.get_rank() == 0:
    print("HOOKS " + json.dumps({"collect_rank_info": info_s, "after_init_process_group": comm_s,
                                 "at_first_batch": batch_s}))
dist.barrier()
dist.destroy_process_group()
"""


def host_checks(repeat: int) -> None:
    opts = RuntimeOptions(script=Path("train.py"))
    h100 = ROOT / "fixtures" / "nvml" / "h100_sxm_8x_nvswitch.json"
    import_torch = median_time(lambda: subprocess.run([sys.executable, "-c", "import torch"], check=True), repeat)
    here = median_time(lambda: run_host_checks(opts, 2, free_port()), repeat)
    replay = median_time(lambda: run_host_checks(opts, 8, free_port(), nvml=ReplayReads.from_file(h100)), repeat)
    print(f"baseline: python -c 'import torch'          {import_torch * 1e3:8.1f} ms")
    print(f"host checks, this machine                   {here * 1e3:8.1f} ms  ratio {here / import_torch:.3f}")
    print(f"host checks, replayed 8x H100 inventory     {replay * 1e3:8.1f} ms  ratio {replay / import_torch:.3f}")


def rank_hooks(repeat: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="ddplint-bench-"))
    (work / "job.py").write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    ends = {"bare": [], "hooks": []}
    hooks = []
    for _ in range(repeat):
        for mode in ("bare", "hooks"):
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "job.py", mode]
            start = time.perf_counter()
            out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
            ends[mode].append(time.perf_counter() - start)
            if out.returncode:
                sys.exit(f"torchrun failed:\n{out.stderr[-2000:]}")
            for line in out.stdout.splitlines():
                if line.startswith("HOOKS "):
                    hooks.append(json.loads(line[6:]))
    bare, hooked = statistics.median(ends["bare"]), statistics.median(ends["hooks"])
    for name in ("collect_rank_info", "after_init_process_group", "at_first_batch"):
        print(f"rank hook {name:<26} {statistics.median(h[name] for h in hooks) * 1e3:8.1f} ms")
    total = statistics.median(sum(h.values()) for h in hooks)
    print(f"rank hooks in total                         {total * 1e3:8.1f} ms")
    print(f"baseline: torchrun 2 ranks, tiny DDP step   {bare:8.2f} s")
    print(f"same with the rank hooks                    {hooked:8.2f} s  ratio {hooked / bare:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    host_checks(args.repeat)
    rank_hooks(args.repeat)


if __name__ == "__main__":
    main()
