"""`[tool.ddplint]` from the nearest pyproject.toml, merged with command-line flags."""

from __future__ import annotations

import fnmatch
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", ".eggs", "__pycache__",
    "build", "dist", "node_modules", "site-packages", ".mypy_cache", ".pytest_cache", ".ruff_cache",
)
KNOWN_KEYS = {
    "select", "ignore", "per-file-ignores", "exclude", "extend-exclude",
    "extend-main-process-predicates", "extend-main-process-helpers",
}


class ConfigError(Exception):
    """Invalid configuration or selector; the message is one line for the user."""


@dataclass(frozen=True)
class Config:
    root: Path  # directory of the pyproject.toml, or the working directory
    source: Path | None = None  # the pyproject.toml that was read
    select: tuple[str, ...] = ("ALL",)
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    main_process_predicates: tuple[str, ...] = ()
    main_process_helpers: tuple[str, ...] = ()
    force_exclude: bool = False
    codes: frozenset[str] = field(default_factory=frozenset)  # codes known to this build

    def enabled(self, code: str) -> bool:
        """ruff's rule: the most specific matching selector wins; ignore wins a tie."""
        selected = max((len(s) for s in self.select if _matches(s, code)), default=-1)
        ignored = max((len(s) for s in self.ignore if _matches(s, code)), default=-1)
        return selected >= 0 and selected > ignored

    def enabled_codes(self) -> list[str]:
        return sorted(c for c in self.codes if self.enabled(c))

    def ignored_in(self, path: Path) -> set[str]:
        rel = self.relative(path)
        out: set[str] = set()
        for pattern, codes in self.per_file_ignores:
            if _path_matches(rel, pattern):
                out.update(c for c in self.codes if any(_matches(s, c) for s in codes))
        return out

    def is_excluded(self, path: Path) -> bool:
        rel = self.relative(path)
        return any(_path_matches(rel, p) for p in (*self.exclude, *self.extend_exclude))

    def relative(self, path: Path) -> str:
        resolved = Path(os.path.realpath(path))
        try:
            return resolved.relative_to(os.path.realpath(self.root)).as_posix()
        except ValueError:
            return resolved.as_posix()


def _matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


def _path_matches(rel: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    if fnmatch.fnmatch(rel, pattern) or rel == pattern or rel.startswith(pattern + "/"):
        return True
    # a bare name ("build", "*_pb2.py") matches any path component
    return "/" not in pattern and any(fnmatch.fnmatch(part, pattern) for part in PurePosixPath(rel).parts)


def find_pyproject(start: Path) -> Path | None:
    start = Path(os.path.realpath(start))  # realpath, unlike resolve(), survives symlink loops
    for directory in (start if start.is_dir() else start.parent, *start.parents):
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def check_selectors(selectors: tuple[str, ...], codes: frozenset[str], where: str) -> None:
    for s in selectors:
        if s != "ALL" and not any(c.startswith(s) for c in codes):
            raise ConfigError(f"unknown rule selector {s!r} in {where} (see `ddplint --list-rules`)")


def _strings(table: dict, key: str, where: str) -> tuple[str, ...] | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(value)


def load(start: Path, codes: frozenset[str]) -> Config:
    """Read the nearest pyproject.toml above `start`; no file or no table gives the defaults."""
    pyproject = find_pyproject(start)
    if pyproject is None:
        return Config(root=Path.cwd(), codes=codes)
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{pyproject}: cannot read: {exc}") from None
    table = data.get("tool", {}).get("ddplint")
    config = Config(root=pyproject.parent, source=pyproject, codes=codes)
    if table is None:
        return config
    where = f"{pyproject} [tool.ddplint]"
    unknown = set(table) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown option {sorted(unknown)[0]!r}")
    changes: dict = {}
    for key, attr in (
        ("select", "select"), ("ignore", "ignore"), ("exclude", "exclude"),
        ("extend-exclude", "extend_exclude"),
        ("extend-main-process-predicates", "main_process_predicates"),
        ("extend-main-process-helpers", "main_process_helpers"),
    ):
        value = _strings(table, key, where)
        if value is not None:
            changes[attr] = value
    for key in ("select", "ignore"):
        if key in changes:
            check_selectors(changes[key], codes, where)
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}: `per-file-ignores` must be a table of pattern = [codes]")
    pairs = []
    for pattern, selectors in pfi.items():
        selectors = _strings({pattern: selectors}, pattern, f"{where} per-file-ignores")
        check_selectors(selectors, codes, f"{where} per-file-ignores")
        pairs.append((pattern, selectors))
    changes["per_file_ignores"] = tuple(pairs)
    return replace(config, **changes)
