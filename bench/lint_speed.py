"""Static lint speed against the floor of a bare libcst parse, measured in the same run.

    python bench/lint_speed.py [CORPUS_DIR] [--repeat N]

The default corpus is the installed torch package: real PyTorch code, thousands of files,
and nearly every file mentions torch, so the cheap text pre-check skips almost nothing.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
from pathlib import Path

import libcst as cst
from timing import median_time

from ddplint import config as config_mod
from ddplint.lint.engine import discover, lint_paths
from ddplint.lint.rules import RULES_BY_CODE
from ddplint.lint.source import SourceError, read_source


def default_corpus() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("no corpus given and torch is not installed: pass a directory of Python code")
    return Path(next(iter(spec.submodule_search_locations)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    corpus = args.corpus or default_corpus()
    config = config_mod.Config(root=corpus, codes=frozenset(RULES_BY_CODE), exclude=())
    files, _ = discover([corpus], config)
    texts = []
    for path in files:
        try:
            texts.append(read_source(path))
        except SourceError:
            pass
    print(f"corpus: {corpus} ({len(texts)} files, {sum(map(len, texts)) / 1e6:.1f} MB)")

    def parse_all_ast():
        for text in texts:
            try:
                ast.parse(text)
            except SyntaxError:
                pass

    def parse_all_libcst():
        for text in texts:
            try:
                cst.parse_module(text)
            except cst.ParserSyntaxError:
                pass

    rows = [
        ("ast.parse of every file", median_time(parse_all_ast, args.repeat)),
        ("libcst.parse_module of every file (baseline)", median_time(parse_all_libcst, args.repeat)),
        ("ddplint lint, 1 process (read+parse+facts+rules)",
         median_time(lambda: lint_paths([corpus], config, jobs=1), args.repeat)),
        ("ddplint lint, 2 processes", median_time(lambda: lint_paths([corpus], config, jobs=2), args.repeat)),
    ]
    baseline = rows[1][1]
    print(f"{'what':<52}{'median s':>10}{'vs parse':>10}")
    for name, seconds in rows:
        print(f"{name:<52}{seconds:>10.2f}{seconds / baseline:>9.2f}x")


if __name__ == "__main__":
    main()
