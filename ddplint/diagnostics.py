"""Plain data shared by every layer: what a rule found, where, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    """A rule's level. error: breaks training or corrupts its results (hangs, wrong devices,
    duplicated or missing data, races on files); warning: likely wrong, or costs performance;
    info: advisory. Error and warning rules are on by default, info rules only when selected."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is more severe: `--fail-on` compares levels by it."""
        return _RANKS[self]

    @property
    def on_by_default(self) -> bool:
        return self is not Severity.INFO


_RANKS = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


@dataclass(frozen=True)
class RuleInfo:
    """What selection and listing need to know about a rule, without importing the rules
    (and libcst with them): a run served from the cache never does."""

    code: str
    name: str
    severity: Severity


@dataclass(frozen=True)
class Edit:
    """Replace the source between two 1-based (line, column) positions with `text`."""

    start: tuple[int, int]
    end: tuple[int, int]
    text: str


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]
    safe: bool = True  # an unsafe fix may change behaviour; applied only with --unsafe-fixes


@dataclass(frozen=True)
class Related:
    """Where a finding that comes through a helper happens inside it (SARIF relatedLocations)."""

    path: str
    line: int  # 1-based
    col: int  # 1-based
    message: str


@dataclass(frozen=True)
class Diagnostic:
    path: str  # as the user named it (relative when they passed a relative path)
    line: int  # 1-based
    col: int  # 1-based
    end_line: int
    end_col: int
    code: str  # e.g. "DDP101"
    message: str
    severity: Severity = Severity.ERROR
    fix: Fix | None = None
    source_line: str = ""  # the text of `line`, for fingerprints and context
    cell: int | None = None  # in a notebook: the cell (1-based, all cells counted); `line` is within it
    related: tuple[Related, ...] = ()  # the write, load or setting inside the helper a call reaches

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.col, self.code)


@dataclass(frozen=True)
class FileError:
    """A file that could not be linted at all (unreadable, undecodable, not found)."""

    path: str
    message: str
    line: int | None = None  # for a warning about one line (a noqa comment naming an unknown code)
