"""What skipping libcst's node validation saves (ddplint/lint/parsing.py), parse alone and whole lint.

    python bench/parse_validation.py [CORPUS_DIR ...] [--repeat N]

Per corpus, in turns (paired, so that a change in machine load hits both), `--repeat` times, in
CPU time of this process: libcst's own parse of every file (each node validated as it is built)
and ddplint's parse; then the whole lint (-j 1) with either parse. The medians are printed with
the ratio of ddplint's way to libcst's. The default corpus is the repository's fixtures.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import libcst as cst
from lint_speed import corpus_texts

from ddplint.lint import parsing
from ddplint.lint.engine import lint_paths

ROOT = Path(__file__).resolve().parent.parent
UNCHECKED = parsing.parse_module


def measure(corpus: Path, repeat: int) -> None:
    config, texts = corpus_texts(corpus)
    print(f"\n{corpus}: {len(texts)} files, {sum(map(len, texts)) / 1e6:.2f} MB", flush=True)

    def parse_all(parse: Callable[[str], cst.Module]) -> None:
        gc.disable()
        try:
            for text in texts:
                try:
                    parse(text)
                except (cst.ParserSyntaxError, TypeError, cst.CSTValidationError):
                    pass  # (the validated parse raises the last two on some valid code)
        finally:
            gc.enable()

    def lint_with(parse: Callable[[str], cst.Module]) -> None:
        parsing.parse_module = parse  # what the analysis and the project index call
        try:
            lint_paths([corpus], config, jobs=1)
        finally:
            parsing.parse_module = UNCHECKED

    steps = {
        ("parse", "validated"): lambda: parse_all(cst.parse_module),
        ("parse", "ddplint"): lambda: parse_all(UNCHECKED),
        ("lint", "validated"): lambda: lint_with(cst.parse_module),
        ("lint", "ddplint"): lambda: lint_with(UNCHECKED),
    }
    lint_with(UNCHECKED)  # imports and first-use caches, outside the clock
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    for turn in range(repeat):
        for name, step in steps.items():
            start = time.process_time()
            step()
            runs[name].append(time.process_time() - start)
        print(f"  turn {turn + 1}/{repeat}: " + ", ".join(f"{a} {b} {t[-1]:.2f} s" for (a, b), t in runs.items()), flush=True)
    medians = {name: statistics.median(times) for name, times in runs.items()}
    for what in ("parse", "lint"):
        base, own = medians[(what, "validated")], medians[(what, "ddplint")]
        print(f"  {what:<6} validated {base:7.2f} s   ddplint {own:7.2f} s   ratio {own / base:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="*", type=Path, help="directories of Python code (default: the fixtures)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for corpus in args.corpus or [ROOT / "fixtures"]:
        measure(corpus, args.repeat)


if __name__ == "__main__":
    main()
