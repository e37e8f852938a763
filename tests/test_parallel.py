"""Worker processes start only when the source adds up to enough bytes to pay for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddplint import config as config_mod
from ddplint.lint import engine
from ddplint.lint.discovery import SourceFile
from ddplint.lint.rules import KNOWN_RULES

KB = 1024


def files(*sizes: int) -> list[SourceFile]:
    return [SourceFile(Path(f"f{i}.py"), size) for i, size in enumerate(sizes)]


@pytest.mark.parametrize(
    "sizes,jobs,expected",
    [
        ((2 * KB,) * 93, 0, 1),  # a repository of small files: this process, as -j 1
        ((engine.BYTES_PER_WORKER,), 8, 1),  # one file never needs a pool
        ((engine.BYTES_PER_WORKER // 2,) * 8, 8, 4),  # by bytes, not by file count
        ((engine.BYTES_PER_WORKER,) * 40, 3, 3),  # never more than -j
        ((engine.BYTES_PER_WORKER,) * 40, 1, 1),
    ],
)
def test_planned_workers(sizes, jobs, expected, monkeypatch):
    monkeypatch.setattr(engine.os, "cpu_count", lambda: 16)
    assert engine.planned_workers(files(*sizes), jobs) == expected


def test_a_small_run_starts_no_worker_process(tmp_path, monkeypatch):
    for i in range(30):
        (tmp_path / f"t{i}.py").write_text("import torch\nx = torch.zeros(1).to('cuda:0')\n")

    def refuse(*args, **kwargs):
        raise AssertionError("a worker pool was started for a few kB of source")

    monkeypatch.setattr(engine, "ProcessPoolExecutor", refuse)
    config = config_mod.Config(root=tmp_path, rules=KNOWN_RULES)
    assert engine.lint_paths([tmp_path], config).files == 30


def test_chunks_keep_files_in_order_and_balance_bytes(tmp_path, monkeypatch):
    sizes = [300 * KB, 10 * KB, 10 * KB, 280 * KB, 20 * KB]
    seen: list[list[str]] = []

    class Inline:
        def __init__(self, max_workers, initializer):
            self.max_workers = max_workers

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, function, chunks, configs):
            seen.extend([p.name for p in chunk] for chunk in chunks)
            return [[] for _ in chunks]

    monkeypatch.setattr(engine, "ProcessPoolExecutor", Inline)
    engine._lint_all(files(*sizes), config_mod.Config(root=tmp_path), jobs=2)
    assert seen == [["f0.py", "f1.py"], ["f2.py", "f3.py", "f4.py"]]  # 310 kB each
