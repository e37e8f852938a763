"""Static lint speed, 1 process, against the floor of a bare libcst parse of the same files.

    python bench/lint_speed.py [CORPUS_DIR ...] [--repeat N] [--jobs2] [--peers DIR]

For each corpus, the parse floor and the lint are timed in turns (paired, so that a change in
machine load hits both), `--repeat` times, in CPU time of this process (other processes on a
shared machine count less); the medians are printed, with the lint's ratio to the floor. Then
lints with every phase timed (exclusive time, so a helper module parsed from inside a rule
counts as parse), each phase's share of that lint applied to the lint's median ratio:

    guard      Python's parse and the depth bound (limits.py), before libcst sees the file
    parse      libcst.parse_module (linted files and the project helpers they import)
    facts      the facts pass (facts.collect)
    rules      the rules, the project lookups and the engine's glue around them
    positions  line and column of the reported and edited nodes, and the diagnostics
    report     the text report of the findings (as the CLI prints it)
    other      reading, discovery, noqa comments, sorting

With Fixit and TorchFix installed (on PATH, or their executables in `--peers DIR`: they pin a
libcst older than ddplint's, so a venv of their own), each corpus is also linted by the three
command-line tools in turns, each a fresh process (start-up included, ddplint with --no-cache),
and their CPU time (user + system of the child) is compared: the paired peer comparison.

The default corpora are the repository's fixtures (DDP-heavy scripts, nearly every one with
findings) and, when torch is installed, its own DDP code (torch/nn/parallel and
torch/distributed/algorithms); about a minute in all at the default --repeat.
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib.util
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Self

import libcst as cst

from ddplint import config as config_mod
from ddplint.lint import analysis, limits
from ddplint.lint import facts as facts_mod
from ddplint.lint.engine import discover, lint_paths
from ddplint.lint.rules import KNOWN_RULES
from ddplint.lint.source import SourceError, read_source
from ddplint.report import text as text_report

PHASES = ("guard", "parse", "facts", "rules", "positions", "report", "other")
parse_module = cst.parse_module  # the floor calls it unwrapped


def default_corpora() -> list[Path]:
    """The fixtures, and torch's DDP code gathered in one temporary folder (if torch is installed)."""
    corpora = [Path(__file__).resolve().parent.parent / "fixtures"]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        torch = Path(next(iter(spec.submodule_search_locations)))
        folder = Path(tempfile.mkdtemp(prefix="ddplint-bench-")) / "torch-ddp"
        for part in ("nn/parallel", "distributed/algorithms"):
            if (torch / part).is_dir():
                shutil.copytree(torch / part, folder / part.replace("/", "-"))
        corpora.append(folder)
    return corpora


class PhaseClock:
    """Exclusive time per phase: entering a phase pauses the one it was entered from."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.stack: list[str] = []
        self.mark = 0.0
        self.undo: list[tuple[object, str, object]] = []

    def enter(self, name: str) -> None:
        now = time.process_time()
        if self.stack:
            self.totals[self.stack[-1]] += now - self.mark
        self.stack.append(name)
        self.mark = now

    def leave(self) -> None:
        now = time.process_time()
        self.totals[self.stack.pop()] += now - self.mark
        self.mark = now

    def wrap(self, owner: object, attr: str, name: str) -> None:
        original = getattr(owner, attr, None)
        if original is None:
            return  # not in this version of the engine

        def timed(*args, **kwargs):
            self.enter(name)
            try:
                return original(*args, **kwargs)
            finally:
                self.leave()

        setattr(owner, attr, timed)
        self.undo.append((owner, attr, original))

    def __enter__(self) -> Self:
        try:
            from ddplint.lint import positions
        except ImportError:  # an engine from before positions.py
            positions = None
        for owner, attr, name in [
            (limits, "parse_python", "guard"),
            (limits, "check_depth", "guard"),
            (limits, "may_be_newer_syntax", "guard"),
            (limits, "guard", "guard"),
            (cst, "parse_module", "parse"),
            (facts_mod, "collect", "facts"),
            (analysis, "analyse", "rules"),
            (positions, "ranges", "positions"),
            (analysis, "_diagnostic", "positions"),
        ]:
            if owner is not None:
                self.wrap(owner, attr, name)
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, attr, original in reversed(self.undo):
            setattr(owner, attr, original)


def corpus_texts(corpus: Path) -> tuple[config_mod.Config, list[str]]:
    """The configuration that selects every rule for a corpus, and the text of each file it lints."""
    config = config_mod.Config(root=corpus, rules=KNOWN_RULES, select=("ALL",), exclude=())
    files, _ = discover([corpus], config)
    texts = []
    for path in files:
        try:
            texts.append(read_source(path))
        except SourceError:
            pass
    return config, texts


def measure(corpus: Path, repeat: int, jobs2: bool) -> dict[str, float]:
    config, texts = corpus_texts(corpus)
    size = sum(map(len, texts)) / 1e6
    print(f"\n{corpus.name}: {corpus} ({len(texts)} files, {size:.2f} MB)", flush=True)

    def floor():
        gc.disable()  # as the engine lints a file
        try:
            for text in texts:
                try:
                    parse_module(text)
                except cst.ParserSyntaxError:
                    pass
        finally:
            gc.enable()

    def parse_all_ast():
        for text in texts:
            try:
                ast.parse(text)
            except SyntaxError:
                pass

    def lint():
        return lint_paths([corpus], config, jobs=1)

    lint()  # imports and first-use caches, outside the clock
    runs: dict[str, list[float]] = defaultdict(list)
    steps = [("libcst parse (floor)", floor), ("ast.parse", parse_all_ast), ("lint -j 1", lint)]
    if jobs2:
        steps.append(("lint -j 2", lambda: lint_paths([corpus], config, jobs=2)))
    for turn in range(repeat):
        for name, fn in steps:
            start = time.process_time()
            fn()
            runs[name].append(time.process_time() - start)
        print(
            f"  turn {turn + 1}/{repeat}: floor {runs['libcst parse (floor)'][-1]:.2f} s, lint {runs['lint -j 1'][-1]:.2f} s",
            flush=True,
        )
    phases: dict[str, list[float]] = defaultdict(list)
    for _ in range(max(1, repeat // 2)):
        with PhaseClock() as clock:
            clock.enter("other")
            result = lint()
            clock.enter("report")
            text_report.render(result, config)
            clock.leave()
            clock.leave()
        for name in PHASES:
            phases[name].append(clock.totals.get(name, 0.0))
    medians = {name: statistics.median(times) for name, times in runs.items()}
    base = medians["libcst parse (floor)"]
    print(f"  {'what':<24}{'median s':>10}{'vs floor':>10}")
    for name, seconds in medians.items():
        print(f"  {name:<24}{seconds:>10.2f}{seconds / base:>9.2f}x")
    timed = {name: statistics.median(times) for name, times in phases.items()}
    ratio, total = medians["lint -j 1"] / base, sum(timed.values()) - timed["report"]
    print(f"  phases, vs floor ({len(result.diagnostics)} findings; the instrumented lint took {total:.2f} s):")
    print("  " + "  ".join(f"{name} {timed[name] / total * ratio:.2f}x" for name in PHASES))
    return {"floor": base, "lint": medians["lint -j 1"]}


def compare_peers(corpus: Path, repeat: int, peer_dir: Path | None) -> dict[str, float]:
    """CPU seconds (median of `repeat` paired turns) of ddplint, Fixit and TorchFix on a corpus,
    each as its own process; peers that are not installed are left out."""

    def found(name: str) -> str | None:
        return str(peer_dir / name) if peer_dir and (peer_dir / name).exists() else shutil.which(name)

    commands = {"ddplint": [sys.executable, "-m", "ddplint", "--no-cache", "--select", "ALL", "--exit-zero", "-q", str(corpus)]}
    for name, tail in (("fixit", ["lint", str(corpus)]), ("torchfix", [str(corpus)])):
        exe = found(name)
        if exe is not None:
            commands[name] = [exe, *tail]
    if len(commands) == 1:
        return {}
    runs: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeat):
        for name, command in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            runs[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    medians = {name: statistics.median(times) for name, times in runs.items()}
    own = medians["ddplint"]
    print(
        "  peers, CPU s of each command (paired turns): "
        + ", ".join(f"{name} {seconds:.2f} s ({seconds / own:.1f}x ddplint)" for name, seconds in medians.items()),
        flush=True,
    )
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="*", type=Path, help="directories of Python code (default: see above)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs2", action="store_true", help="also time the lint with 2 worker processes")
    parser.add_argument("--peers", type=Path, help="directory with the fixit and torchfix executables (default: PATH)")
    args = parser.parse_args()
    corpora = args.corpus or default_corpora()
    summary = {}
    for corpus in corpora:
        summary[corpus] = measure(corpus, args.repeat, args.jobs2)
        summary[corpus].update(compare_peers(corpus, args.repeat, args.peers))
    print(f"\n{'corpus':<28}{'floor s':>9}{'lint s':>9}{'ratio':>8}{'fixit/ddplint':>15}{'torchfix/ddplint':>18}")
    for corpus, row in summary.items():
        peers = [f"{row[name] / row['ddplint']:.1f}x" if name in row else "-" for name in ("fixit", "torchfix")]
        print(
            f"{corpus.name:<28}{row['floor']:>9.2f}{row['lint']:>9.2f}{row['lint'] / row['floor']:>7.2f}x"
            f"{peers[0]:>15}{peers[1]:>18}"
        )


if __name__ == "__main__":
    main()
