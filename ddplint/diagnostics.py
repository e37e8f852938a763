"""Plain data shared by every layer: what a rule found, where, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


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
