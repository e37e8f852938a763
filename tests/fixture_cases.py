"""Fixture scripts under fixtures/lint/ state their expected findings in a header comment.

    # ddplint-expect: DDP101:12 DDP102:20     (code:line, as many as needed, any number of lines)
    # ddplint-expect: clean                    (no finding at all)

Every .py file with such a header is a case, linted alone as `ddplint FILE` would; files
without one are helper modules that a case imports.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ddplint import config as config_mod
from ddplint.lint.engine import lint_paths
from ddplint.lint.rules import KNOWN_RULES

LINT_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "lint"
HEADER = re.compile(r"^# ddplint-expect:(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Case:
    path: Path
    expected: frozenset[tuple[str, int]]

    @property
    def id(self) -> str:
        return self.path.relative_to(LINT_FIXTURES).as_posix()


def load_cases() -> list[Case]:
    cases = []
    for path in sorted(LINT_FIXTURES.rglob("*.py")):
        headers = HEADER.findall(path.read_text(encoding="utf-8", errors="replace"))
        if not headers:
            continue
        expected = set()
        for header in headers:
            for item in header.split():
                if item == "clean":
                    continue
                code, _, line = item.partition(":")
                expected.add((code, int(line)))
        cases.append(Case(path, frozenset(expected)))
    return cases


def found(case: Case) -> frozenset[tuple[str, int]]:
    config = config_mod.Config(root=case.path.parent, rules=KNOWN_RULES, select=("ALL",))  # every rule
    result = lint_paths([case.path], config, jobs=1)
    assert not result.errors and not result.internal_errors, (result.errors, result.internal_errors)
    return frozenset((d.code, d.line) for d in result.diagnostics)


def score(cases: list[Case]) -> dict[str, dict[str, int]]:
    """True positives, false positives and false negatives per rule, over all cases."""
    counts: dict[str, Counter] = {}
    for case in cases:
        got = found(case)
        for code, _ in case.expected | got:
            counts.setdefault(code, Counter())
        for code, _ in got & case.expected:
            counts[code]["tp"] += 1
        for code, _ in got - case.expected:
            counts[code]["fp"] += 1
        for code, _ in case.expected - got:
            counts[code]["fn"] += 1
    return {code: dict(c) for code, c in sorted(counts.items())}
