"""A cold run (no .ddplint_cache/) against warm runs (nothing changed) of a whole repository,
each a fresh `python -m ddplint` process as a user runs it.

    python bench/cache.py /tmp/detectron2 [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run(root: Path) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ddplint", "-q", "--exit-zero", "."], cwd=root, capture_output=True, check=False)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("repository", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cache = args.repository / ".ddplint_cache"
    colds, warms = [], []
    for _ in range(2):
        shutil.rmtree(cache, ignore_errors=True)
        colds.append(run(args.repository))
        warms.extend(run(args.repository) for _ in range(args.repeat))
    files = sum(1 for _ in args.repository.rglob("*.py"))
    cold, warm = statistics.median(colds), statistics.median(warms)
    print(f"{args.repository}: {files} .py files")
    print(f"  cold {cold:6.2f} s  (runs {', '.join(f'{t:.2f}' for t in colds)})")
    print(f"  warm {warm:6.2f} s  (median of {len(warms)})")
    print(f"  warm is {cold / warm:.0f}x faster")


if __name__ == "__main__":
    main()
