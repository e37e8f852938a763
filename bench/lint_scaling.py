"""How lint time grows with the size of one file: seconds per 1,000 lines at 1k, 10k and 50k.

    python bench/lint_scaling.py [--sizes 1000 10000 50000] [--repeat N]

The script is built of ordinary training code (process-group setup, a model class, loaders
with a DistributedSampler, train and eval loops, guarded and unguarded saves), repeated with
fresh names until it has the size asked for, and linted in this process as one file (the size
cap and the per-file CPU limit, which exist to refuse such files, are lifted). Linear cost means
the same seconds per 1,000 lines at every size; the last column is the ratio to the smallest
size, measured in this run, beside the same ratio for libcst's parse alone (the floor, which
is not quite linear itself).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import libcst
from timing import median_time

from ddplint import config as config_mod
from ddplint.lint import limits
from ddplint.lint.engine import lint_text
from ddplint.lint.project import ProjectIndex
from ddplint.lint.rules import ALL_RULES, KNOWN_RULES

HEADER = """import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
"""

BLOCK = """

def setup_{n}():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    return local_rank, dist.get_rank()


class Model{n}(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU())
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.body(x))


def loaders_{n}(rank, world):
    train = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    val = TensorDataset(torch.randn(64, 32), torch.randint(0, 4, (64,)))
    sampler = DistributedSampler(train, num_replicas=world, rank=rank)
    train_loader = DataLoader(train, batch_size=16, sampler=sampler)
    val_loader = DataLoader(val, batch_size=16)
    return sampler, train_loader, val_loader


def evaluate_{n}(model, loader, device):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
    return correct


def train_{n}(epochs=3):
    local_rank, rank = setup_{n}()
    device = torch.device("cuda", local_rank)
    model = torch.nn.parallel.DistributedDataParallel(Model{n}().to(device), device_ids=[local_rank])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler, train_loader, val_loader = loaders_{n}(rank, dist.get_world_size())
    os.makedirs("runs_{n}", exist_ok=True)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        for x, y in train_loader:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        score = evaluate_{n}(model, val_loader, device)
        if rank == 0:
            torch.save(model.module.state_dict(), f"runs_{n}/epoch{{epoch}}.pt")
            with open("runs_{n}/log.txt", "a") as log:
                log.write(f"{{epoch}} {{score}}\\n")
    torch.save(optimizer.state_dict(), "runs_{n}/optimizer.pt")
    dist.destroy_process_group()
"""
FOOTER = """

if __name__ == "__main__":
    train_0()
"""


def script(lines: int) -> str:
    parts = [HEADER]
    total, n = HEADER.count("\n"), 0
    while total < lines:
        block = BLOCK.format(n=n)
        parts.append(block)
        total += block.count("\n")
        n += 1
    return "".join(parts) + FOOTER


def main() -> None:
    # The size cap and the CPU-time limit per file would refuse the larger scripts; this
    # measures what the analysis costs, so both are lifted here (the text is passed directly).
    limits.cpu_time_limit = contextlib.nullcontext
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for size in args.sizes:
            path = Path(tmp) / f"train_{size}.py"
            text = script(size)
            path.write_text(text)
            lines = text.count("\n")
            config = config_mod.Config(root=Path(tmp), rules=KNOWN_RULES, select=("ALL",))
            rules = [rule() for rule in ALL_RULES]

            def lint(path=path, text=text, config=config, rules=rules):
                return lint_text(path, text, config, rules, ProjectIndex())

            found = len(lint().diagnostics)
            seconds = median_time(lint, args.repeat)
            floor = median_time(lambda text=text: libcst.parse_module(text), args.repeat)
            rows.append((lines, seconds, found, floor))
        base = rows[0][1] / rows[0][0] * 1000
        floor_base = rows[0][3] / rows[0][0] * 1000
        print(f"{'lines':>8} {'seconds':>9} {'s/1k lines':>11} {'findings':>9} {'vs smallest':>12} {'parse alone':>12}")
        for lines, seconds, found, floor in rows:
            per = seconds / lines * 1000
            floor_per = floor / lines * 1000
            print(f"{lines:>8} {seconds:>9.2f} {per:>11.3f} {found:>9} {per / base:>11.2f}x {floor_per / floor_base:>11.2f}x")


if __name__ == "__main__":
    main()
