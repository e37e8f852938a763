"""Does the default worker count pay? `ddplint` with the default -j against -j 1 (and -j 2),
side by side on the same corpus, each a fresh process as a user runs it, interleaved so that
a change in machine load hits every setting alike. Also the corpus copied N times over, to see
where workers start to pay (engine.BYTES_PER_WORKER).

    python bench/parallel.py /tmp/examples            # e.g. pytorch/examples extracted there
    python bench/parallel.py /tmp/examples --copies 4 --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def corpus_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.py") if p.is_file())


def run(root: Path, jobs: str | None) -> float:
    args = [sys.executable, "-m", "ddplint", "--no-cache", "--exit-zero", "-q", str(root)]
    if jobs is not None:
        args[3:3] = ["-j", jobs]
    started = time.perf_counter()
    subprocess.run(args, capture_output=True, check=False)
    return time.perf_counter() - started


def compare(root: Path, repeat: int) -> None:
    settings = {"default -j": None, "-j 1": "1", "-j 2": "2"}
    times: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(repeat):
        for name, jobs in settings.items():
            times[name].append(run(root, jobs))
    files = sum(1 for _ in root.rglob("*.py"))
    print(f"{root}: {files} files, {corpus_bytes(root) / 1e3:.0f} kB, median of {repeat}")
    base = statistics.median(times["-j 1"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<11} {median:6.2f} s  ({median / base:.2f}x of -j 1; runs {', '.join(f'{v:.2f}' for v in values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--copies", type=int, default=1, help="also run on the corpus copied this many times")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    compare(args.corpus, args.repeat)
    if args.copies > 1:
        with tempfile.TemporaryDirectory() as folder:
            for i in range(args.copies):
                shutil.copytree(args.corpus, Path(folder) / f"copy{i}", ignore=shutil.ignore_patterns(".git"))
            compare(Path(folder), args.repeat)


if __name__ == "__main__":
    main()
