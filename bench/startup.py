"""One script linted from a fresh process, as a pre-commit hook or an editor runs ddplint.

    python bench/startup.py [SCRIPT ...] [--repeat N]

For each script, three commands run in turns (paired, so that a change in machine load hits
all of them), each a fresh interpreter, `--repeat` times:

    python     `python -c pass`: the interpreter's own start-up
    floor      import libcst and parse the script: what any libcst linter pays at least
    ddplint    `python -m ddplint --no-cache -q SCRIPT`

and the median wall-clock times are printed, with ddplint's ratio to the floor. The child
processes may write bytecode (an installed package has it; without it every run compiles
ddplint's modules again), and each command runs once before the timed turns. The default
script is the largest fixture.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = "import sys, libcst; libcst.parse_module(open(sys.argv[1], encoding='utf-8').read())"


def commands(script: Path) -> dict[str, list[str]]:
    return {
        "python": [sys.executable, "-c", "pass"],
        "floor": [sys.executable, "-c", FLOOR, str(script)],
        "ddplint": [sys.executable, "-m", "ddplint", "--no-cache", "-q", str(script)],
    }


def wall(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scripts", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()
    scripts = options.scripts or [max((ROOT / "fixtures").rglob("*.py"), key=lambda p: p.stat().st_size)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    print(f"{'script':<50} {'lines':>5} {'python':>8} {'floor':>8} {'ddplint':>8} {'ratio':>6}")
    for script in scripts:
        runs = commands(script)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for command in runs.values():
            wall(command, env)  # bytecode written, files in the page cache
        for _ in range(options.repeat):
            for name, command in runs.items():
                times[name].append(wall(command, env))
        median = {name: statistics.median(t) for name, t in times.items()}
        lines = len(script.read_text(encoding="utf-8", errors="replace").splitlines())
        label = str(script)[-50:]
        print(
            f"{label:<50} {lines:>5} {median['python']:>7.3f}s {median['floor']:>7.3f}s "
            f"{median['ddplint']:>7.3f}s {median['ddplint'] / median['floor']:>5.2f}x"
        )


if __name__ == "__main__":
    main()
