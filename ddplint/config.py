"""The configuration: `[tool.ddplint]` in the nearest pyproject.toml, or a standalone
`ddplint.toml` / `.ddplint.toml` (top-level keys, as ruff's ruff.toml), merged with
command-line flags. In one directory a ddplint.toml wins over pyproject.toml, and a
pyproject.toml without `[tool.ddplint]` does not stop the search upward (as in ruff)."""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass, replace
from functools import cache, cached_property
from pathlib import Path, PurePosixPath

from ddplint.diagnostics import RuleInfo, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
)
KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "per-file-ignores",
    "exclude",
    "extend-exclude",
    "extend-main-process-predicates",
    "extend-main-process-helpers",
    "respect-gitignore",
    "baseline",
    "fail-on",
}
STANDALONE = ("ddplint.toml", ".ddplint.toml")


class ConfigError(Exception):
    """Invalid configuration or selector; the message is one line for the user."""


@dataclass(frozen=True)
class Config:
    root: Path  # directory of the pyproject.toml, or the working directory
    source: Path | None = None  # the pyproject.toml or ddplint.toml that was read
    select: tuple[str, ...] | None = None  # None: the rules on by default (error and warning level)
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    main_process_predicates: tuple[str, ...] = ()
    main_process_helpers: tuple[str, ...] = ()
    force_exclude: bool = False
    respect_gitignore: bool = True
    baseline: Path | None = None  # findings recorded there are not reported
    fail_on: Severity = Severity.INFO  # findings of this level or above fail the run
    rules: tuple[RuleInfo, ...] = ()  # the rules known to this build

    @cached_property
    def codes(self) -> frozenset[str]:
        return frozenset(rule.code for rule in self.rules)

    @cached_property
    def _defaults(self) -> frozenset[str]:
        return frozenset(rule.code for rule in self.rules if rule.severity.on_by_default)

    def enabled(self, code: str) -> bool:
        """ruff's rule: the most specific matching selector wins; ignore wins a tie. The default
        selection is the least specific of all: any selector that names a rule overrides it."""
        selected = max((len(s) for s in (*(self.select or ()), *self.extend_select) if _matches(s, code)), default=-1)
        if self.select is None and code in self._defaults:
            selected = max(selected, 0)
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
        return self.is_excluded_relative(self.relative(path))

    def is_excluded_relative(self, rel: str) -> bool:
        """`is_excluded` for a path already made relative to the root (POSIX, symlinks resolved)."""
        whole, part = _excludes((*self.exclude, *self.extend_exclude))
        return bool(whole.match(rel)) or (part is not None and any(part.match(p) for p in rel.split("/")))

    def relative(self, path: Path | str) -> str:
        return relative_to_root(os.path.realpath(path), self.root)


@cache
def _real_root(root: Path) -> str:
    return os.path.realpath(root)


def relative_to_root(resolved: str, root: Path) -> str:
    """A resolved path relative to the root, POSIX; the resolved path itself when outside it."""
    base = _real_root(root)
    if resolved == base:
        return "."
    if resolved.startswith(base.rstrip(os.sep) + os.sep):
        return PurePosixPath(*Path(resolved[len(base.rstrip(os.sep)) + 1 :]).parts).as_posix()
    return Path(resolved).as_posix()


def _matches(selector: str, code: str) -> bool:
    return selector == "ALL" or code.startswith(selector)


@cache
def _pattern(pattern: str) -> tuple[str, re.Pattern[str], bool]:
    pattern = pattern.rstrip("/")
    return pattern, re.compile(fnmatch.translate(pattern)), "/" not in pattern


@cache
def _excludes(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str] | None]:
    """All of `_path_matches` for many patterns in two regexes: the whole path (or a folder
    above it), and the bare names that match any one component."""
    stripped = [p.rstrip("/") for p in patterns]
    whole = "|".join(f"(?:{fnmatch.translate(p)[:-2]}|{re.escape(p)}(?:/.*)?)" for p in stripped) or "(?!)"
    bare = "|".join(f"(?:{fnmatch.translate(p)[:-2]})" for p in stripped if "/" not in p)
    return re.compile(f"(?s:{whole})\\Z"), re.compile(f"(?s:{bare})\\Z") if bare else None


def _path_matches(rel: str, pattern: str) -> bool:
    pattern, regex, bare = _pattern(pattern)
    if regex.match(rel) or rel == pattern or rel.startswith(pattern + "/"):
        return True
    # a bare name ("build", "*_pb2.py") matches any path component
    return bare and any(regex.match(part) for part in rel.split("/"))


def find_config(start: Path) -> Path | None:
    """The nearest ddplint.toml, .ddplint.toml, or pyproject.toml with a [tool.ddplint] table."""
    start = Path(os.path.realpath(start))  # realpath, unlike resolve(), survives symlink loops
    for directory in (start if _is_dir(start) else start.parent, *start.parents):
        for name in STANDALONE:
            if _is_file(directory / name):
                return directory / name
        candidate = directory / "pyproject.toml"
        if _is_file(candidate) and _has_table(candidate):
            return candidate
    return None


def project_root(start: Path) -> Path:
    """Without a configuration: the nearest directory above `start` with a pyproject.toml or
    a .git, else the working directory."""
    start = Path(os.path.realpath(start))
    for directory in (start if _is_dir(start) else start.parent, *start.parents):
        if _is_file(directory / "pyproject.toml") or os.path.lexists(directory / ".git"):
            return directory
    return Path.cwd()


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a directory that cannot be entered
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def _has_table(pyproject: Path) -> bool:
    """Cheap test before parsing: does the file mention the table at all (broken TOML still counts)."""
    try:
        return "ddplint" in pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # reported when it is read


def resolve_selectors(selectors: tuple[str, ...], rules: tuple[RuleInfo, ...], where: str) -> tuple[str, ...]:
    """Selectors as codes: `ALL`, a code or code prefix (any case), or a rule's name
    (`hard-coded-cuda-index`). Anything else is an error, not silence."""
    names = {rule.name: rule.code for rule in rules}
    out = []
    for s in selectors:
        code = names.get(s.strip().lower(), s.strip().upper())
        if code != "ALL" and not any(rule.code.startswith(code) for rule in rules):
            raise ConfigError(f"unknown rule selector {s!r} in {where} (see `ddplint --list-rules`)")
        out.append(code)
    return tuple(out)


def parse_level(value: object, where: str) -> Severity:
    """`fail-on` / `--fail-on`: one of the levels, by name."""
    levels = ", ".join(level.value for level in Severity)
    if not isinstance(value, str) or value.strip().lower() not in {level.value for level in Severity}:
        raise ConfigError(f"unknown level {value!r} in {where} (one of {levels})")
    return Severity(value.strip().lower())


def _strings(table: dict, key: str, where: str) -> tuple[str, ...] | None:
    if key not in table:
        return None
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: `{key}` must be a list of strings")
    return tuple(value)


def _governing(start: Path) -> Path | None:
    return start if start.name.endswith(".toml") and _is_file(start) else find_config(start)


def root_of(start: Path) -> Path:
    """The project root `load(start, ...)` will use, found without reading the configuration."""
    found = _governing(start)
    return found.parent if found is not None else project_root(start)


def load(start: Path, rules: tuple[RuleInfo, ...]) -> Config:
    """Read the configuration that governs `start` (a file named by --config, or the nearest one
    above); none gives the defaults, rooted at the working directory."""
    found = _governing(start)
    if found is None:
        return Config(root=project_root(start), rules=rules)
    try:
        data = tomllib.loads(found.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{found}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    config = Config(root=found.parent, source=found, rules=rules)
    table: dict | None
    if found.name in STANDALONE:
        table, where = data, str(found)
    else:
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{found}: `tool` must be a table")
        table = tool.get("ddplint")
        if table is None:
            return config
        where = f"{found} [tool.ddplint]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: must be a table of options")
    unknown = set(table) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown option {min(unknown)!r}")
    changes: dict = {}
    for key, attr in (
        ("select", "select"),
        ("extend-select", "extend_select"),
        ("ignore", "ignore"),
        ("exclude", "exclude"),
        ("extend-exclude", "extend_exclude"),
        ("extend-main-process-predicates", "main_process_predicates"),
        ("extend-main-process-helpers", "main_process_helpers"),
    ):
        value = _strings(table, key, where)
        if value is not None:
            changes[attr] = value
    for key in ("select", "extend_select", "ignore"):
        if key in changes:
            changes[key] = resolve_selectors(changes[key], rules, where)
    if "fail-on" in table:
        changes["fail_on"] = parse_level(table["fail-on"], f"{where} `fail-on`")
    if "respect-gitignore" in table:
        if not isinstance(table["respect-gitignore"], bool):
            raise ConfigError(f"{where}: `respect-gitignore` must be true or false")
        changes["respect_gitignore"] = table["respect-gitignore"]
    if "baseline" in table:
        if not isinstance(table["baseline"], str):
            raise ConfigError(f"{where}: `baseline` must be a path (a string)")
        changes["baseline"] = found.parent / table["baseline"]
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where}: `per-file-ignores` must be a table of pattern = [codes]")
    pairs = []
    for pattern, selectors in pfi.items():
        codes_for = _strings({pattern: selectors}, pattern, f"{where} per-file-ignores") or ()
        pairs.append((pattern, resolve_selectors(codes_for, rules, f"{where} per-file-ignores")))
    changes["per_file_ignores"] = tuple(pairs)
    return replace(config, **changes)
