"""Paths as CI systems want them: relative to the repository root, with forward slashes.

Code scanning and Actions annotations both resolve a path against the checkout, so a run
started from a subdirectory or given absolute paths must still name `src/train.py`.
"""

from __future__ import annotations

from pathlib import Path


def repository_root(cwd: Path | None = None) -> Path:
    """The git work tree around the working directory (`.git` is a file in worktrees), else the directory."""
    start = (cwd or Path.cwd()).resolve()
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return start


def relative_to(path: str, root: Path) -> str | None:
    """`path` below `root` in POSIX form, or None when it lies outside."""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None
