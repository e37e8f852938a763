"""Precision and recall of the static analyzer on a labelled set of real training code.

    python bench/accuracy.py SET_DIR [SET_DIR ...] [--select ALL] [-v]

A set is a directory laid out by whoever labelled it (never by someone who has read the
analyzer), holding copies of public repositories' files, never committed here:

    SET_DIR/targets.txt   one target file per line, relative to SET_DIR (targets without
                          labels are clean ones and count for precision)
    SET_DIR/labels.csv    header `target,line,code,certainty,reason`: one row per mistake,
                          `line` a line of the target file (for a mistake inside a project
                          helper, the line of the target's call of it), `certainty` sure or
                          unsure

Each set is linted in one ddplint process, targets named on the command line (their project
helpers followed as usual), with --no-cache. A finding matches a label of the same target and
code within 3 lines, at its own line or at a `related` location in the target (for a rule that
reports an absence once per process, DDP103 and DDP402, anywhere in the target: where the
missing call belongs is a matter of taste); each label and each finding matches at most once,
the nearest first. A finding that matches nothing is a false
alarm; a sure label that nothing matches is a miss (an unsure one is not counted missing).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

SLACK = 3  # lines between a label and the finding that matches it
ANYWHERE = frozenset({"DDP103", "DDP402"})  # absences: a label matches the code anywhere in the target


@dataclass(frozen=True)
class Label:
    target: str
    line: int
    code: str
    sure: bool
    reason: str


@dataclass(frozen=True)
class Finding:
    target: str
    lines: tuple[int, ...]  # its own line, then the related lines inside the target
    code: str
    message: str


@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, other: Score) -> None:
        self.tp, self.fp, self.fn = self.tp + other.tp, self.fp + other.fp, self.fn + other.fn

    def row(self, name: str) -> str:
        precision = self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")
        recall = self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")
        return f"{name:<10}{self.tp:>5}{self.fp:>5}{self.fn:>5}{precision:>11.3f}{recall:>9.3f}"


def read_set(root: Path) -> tuple[list[str], list[Label]]:
    targets = [line.strip() for line in (root / "targets.txt").read_text().splitlines() if line.strip()]
    labels = []
    with (root / "labels.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            labels.append(
                Label(
                    row["target"].strip(),
                    int(row["line"]),
                    row["code"].strip(),
                    row["certainty"].strip().lower() == "sure",
                    (row.get("reason") or "").strip(),
                )
            )
    unknown = sorted({label.target for label in labels} - set(targets))
    if unknown:
        sys.exit(f"{root}: labels name files that targets.txt does not list: {', '.join(unknown)}")
    return targets, labels


def lint(root: Path, targets: list[str], select: str) -> list[Finding]:
    command = [sys.executable, "-m", "ddplint", "--no-cache", "--exit-zero", "--output-format", "json"]
    command += ["--select", select, *targets]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{root}: ddplint exited {done.returncode}: {done.stderr.strip()[-500:]}")
    report = json.loads(done.stdout)
    for error in report["errors"]:
        print(f"  not linted: {error['path']}: {error['message']}", file=sys.stderr)
    findings = []
    for item in report["diagnostics"]:
        related = [where["line"] for where in item["related"] if where["path"] == item["path"]]
        findings.append(Finding(item["path"], (item["line"], *related), item["code"], item["message"]))
    return findings


def match(labels: list[Label], findings: list[Finding]) -> tuple[list[tuple[Label, Finding]], list[Finding], list[Label]]:
    """Pairs of (label, finding), the unmatched findings, the unmatched labels."""
    candidates = []
    for i, label in enumerate(labels):
        for j, finding in enumerate(findings):
            if finding.target == label.target and finding.code == label.code:
                distance = min(abs(line - label.line) for line in finding.lines)
                if distance <= SLACK or label.code in ANYWHERE:
                    candidates.append((distance, i, j))
    pairs, used_labels, used_findings = [], set(), set()
    for _, i, j in sorted(candidates):
        if i not in used_labels and j not in used_findings:
            used_labels.add(i)
            used_findings.add(j)
            pairs.append((labels[i], findings[j]))
    false_alarms = [finding for j, finding in enumerate(findings) if j not in used_findings]
    missed = [label for i, label in enumerate(labels) if i not in used_labels]
    return pairs, false_alarms, missed


def family(code: str) -> str:
    return code[:4] + "xx"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sets", nargs="+", type=Path)
    parser.add_argument("--select", default="ALL", help="ddplint's --select (default ALL)")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every match, false alarm and miss")
    args = parser.parse_args()
    scores: dict[str, Score] = defaultdict(Score)
    for root in args.sets:
        targets, labels = read_set(root)
        pairs, false_alarms, missed = match(labels, lint(root, targets, args.select))
        missed_sure = [label for label in missed if label.sure]
        for label, _ in pairs:
            scores[family(label.code)].tp += 1
        for finding in false_alarms:
            scores[family(finding.code)].fp += 1
        for label in missed_sure:
            scores[family(label.code)].fn += 1
        if args.verbose:
            print(f"\n{root}: {len(targets)} targets, {len(labels)} labels ({sum(label.sure for label in labels)} sure)")
            for label, finding in pairs:
                print(f"  TP {label.target}:{finding.lines[0]} {label.code} (labelled {label.line}: {label.reason})")
            for finding in false_alarms:
                print(f"  FP {finding.target}:{finding.lines[0]} {finding.code} {finding.message[:110]}")
            for label in missed_sure:
                print(f"  FN {label.target}:{label.line} {label.code} ({label.reason})")
    total = Score()
    print(f"\n{'family':<10}{'TP':>5}{'FP':>5}{'FN':>5}{'precision':>11}{'recall':>9}")
    for name in sorted(scores):
        total.add(scores[name])
        print(scores[name].row(name))
    print(total.row("all"))


if __name__ == "__main__":
    main()
