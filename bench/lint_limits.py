"""What the per-file limits cost: files of different shapes at the size cap (source.MAX_BYTES),
each linted in one process (median of --repeat). The cap is set so that plain code lints in a
few seconds; the CPU-time limit (limits.CPU_SECONDS) catches shapes slower than that.

    python bench/lint_limits.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from ddplint import config as config_mod
from ddplint.lint.engine import lint_paths
from ddplint.lint.rules import RULES_BY_CODE
from ddplint.lint.source import MAX_BYTES

HEAD = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"


def fill(unit: str, head: str = HEAD) -> str:
    return head + unit * ((MAX_BYTES - len(head) - 1) // len(unit))


def shapes() -> dict[str, str]:
    plain = "".join(
        line
        for p in sorted(FIXTURES.rglob("*.py"))
        for line in p.read_text(encoding="utf-8").splitlines(keepends=True)
        if "__future__" not in line
    )
    plain *= MAX_BYTES // len(plain) + 1
    numbers = ", ".join(str(i) for i in range(200_000))
    return {
        "plain code (the fixtures, concatenated)": plain[: plain.rfind("\n\n\n", 0, MAX_BYTES - 1) + 1],
        "one-line list literal": HEAD + "x = [" + numbers[: MAX_BYTES - len(HEAD) - 8].rsplit(",", 1)[0] + "]\n",
        "a finding on every line": fill("torch.zeros(1).to('cuda:0')\n"),
        "dict literals": fill("d = {'a': 1, 'b': [1, 2, 3], 'c': {'x': (1, 2)}}\n"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"size cap {MAX_BYTES // 1024} KiB; median of {args.repeat}; CPU seconds of this process")
    with tempfile.TemporaryDirectory() as folder:
        config = config_mod.Config(root=Path(folder), codes=frozenset(RULES_BY_CODE))
        for name, text in shapes().items():
            path = Path(folder) / "shape.py"
            path.write_text(text, encoding="utf-8")
            seconds, outcome = [], ""
            for _ in range(args.repeat):
                before = resource.getrusage(resource.RUSAGE_SELF)
                started = time.perf_counter()
                result = lint_paths([path], config, jobs=1)
                after = resource.getrusage(resource.RUSAGE_SELF)
                seconds.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                outcome = result.errors[0].message if result.errors else f"{len(result.diagnostics)} findings"
                wall = time.perf_counter() - started
            print(
                f"  {name:<40} {len(text) // 1024:4d} KiB  {statistics.median(seconds):5.2f} s CPU "
                f"(last wall {wall:.2f} s)  {outcome}"
            )


if __name__ == "__main__":
    main()
