"""Modules of the user's own project, found on disk from the imports of a linted file.

A training script's guards and device setup often live in a helper module (`utils.py`,
`util/misc.py`). Those modules are parsed on demand, once per run, even when only the
script was named on the command line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import libcst as cst

from ddplint.lint import facts as facts_mod
from ddplint.lint import import_paths, limits, parsing
from ddplint.lint import names as names_mod
from ddplint.lint import positions as positions_mod
from ddplint.lint.source import SourceError, read_source

SEARCH_PARENTS = 3  # how far above the script to look for a top-level package


class Located(NamedTuple):
    """A project module that defines a qualified name."""

    path: Path
    facts: facts_mod.ModuleFacts
    attr: str  # the attribute left over ("save_on_master"), "" for the module itself


@dataclass(frozen=True)
class Lookup:
    """Where an imported name lives in the project, and the module files tried that do not exist."""

    found: tuple[Path, str] | None  # the module file and the attribute left over
    absent: tuple[Path, ...]


class ProjectIndex:
    def __init__(self) -> None:
        # path -> (text, module, facts), or None when it cannot be read or parsed
        self._cache: dict[Path, tuple[str, cst.Module, facts_mod.ModuleFacts] | None] = {}
        # (directory of the importer, dotted name) -> where it lives; rules ask about every call
        self._resolved: dict[tuple[Path, int, str], Lookup] = {}
        # (base, dotted parts) -> the module file, and the files that would hold it in Python's order
        self._files: dict[tuple[Path, tuple[str, ...]], tuple[Path | None, tuple[Path, Path]]] = {}
        self._root_inits: dict[Path, Path] = {}  # importer -> the __init__.py that would extend its package
        self._tops: dict[tuple[Path, str], tuple[bool, tuple[Path, Path]]] = {}  # see _top
        self._bases: dict[tuple[Path, int], list[Path]] = {}  # (importer, level) -> where its imports resolve from
        self._real: dict[Path, Path] = {}  # path -> path.resolve(), once per run
        self._positions: dict[tuple[Path, cst.CSTNode], tuple[int, int] | None] = {}  # (path, node) -> position
        # importer -> the directories it adds to sys.path, and the modules that said so
        self._sys_path_bases: dict[Path, tuple[list[Path], list[Path]]] = {}
        self._on_sys_path: dict[tuple[Path, str], Lookup] = {}  # (importer, dotted name) -> found there
        self._dirs_of_module: dict[Path, tuple[list[Path], list[Path]] | None] = {}  # see _module_dirs

    def real(self, path: Path) -> Path:
        """`path.resolve()`, worked out once per run (each costs a system call per directory)."""
        found = self._real.get(path)
        if found is None:
            found = self._real[path] = path.resolve()
        return found

    def facts_for(self, path: Path) -> facts_mod.ModuleFacts | None:
        path = self.real(path)
        if path not in self._cache:
            self._cache[path] = None  # also breaks import cycles
            try:
                text = read_source(path)
                if not _too_complex(text, path):
                    module = parsing.parse_module(text)
                    self._cache[path] = (text, module, facts_mod.collect(module, self.star_names(path, module)))
            except (SourceError, cst.ParserSyntaxError, RecursionError):
                pass
        cached = self._cache[path]
        return cached[2] if cached is not None else None

    def module_for(self, path: Path) -> cst.Module | None:
        """The parsed module of a project file whose facts were asked for."""
        cached = self._cache.get(self.real(path))
        return cached[1] if cached is not None else None

    def parsed(self, path: Path, text: str) -> tuple[cst.Module, facts_mod.ModuleFacts] | None:
        """The module and facts of `path` if it was already parsed (as a helper) from this text."""
        cached = self._cache.get(self.real(path))
        return (cached[1], cached[2]) if cached is not None and cached[0] == text else None

    def remember(self, path: Path, text: str, module: cst.Module, facts: facts_mod.ModuleFacts) -> None:
        self._cache[self.real(path)] = (text, module, facts)

    def position(self, path: Path, node: cst.CSTNode) -> tuple[int, int] | None:
        """(line, 1-based column) of a node of a parsed project module; worked out only for the
        nodes that a reported finding points into, once per run."""
        path = self.real(path)
        key = (path, node)
        if key not in self._positions:
            cached = self._cache.get(path)
            where = positions_mod.ranges(cached[1], [node], cached[0]).get(id(node)) if cached is not None else None
            self._positions[key] = (where.start.line, where.start.column + 1) if where is not None else None
        return self._positions[key]

    def resolve(self, importer: Path, qualified: str) -> Located | None:
        """Find the project module that defines `qualified` ("util.misc.save_on_master").

        Returns the module's path, its facts and the attribute left over ("save_on_master",
        or "" when the name is the module itself).
        """
        located = self._lookup(importer, qualified).found
        if located is None:
            return None
        module_path, attr = located
        found = self.facts_for(module_path)
        return Located(module_path, found, attr) if found is not None else None

    def star_names(self, importer: Path, module: cst.Module) -> dict[str, str]:
        """What the module's top-level `from m import *` lines bring in from project modules: the
        public functions and classes m defines, and the modules and names m imports (absolutely),
        each as its qualified name. Later star imports win, as in Python."""
        names: dict[str, str] = {}
        for statement in module.body:
            if type(statement) is not cst.SimpleStatementLine:
                continue
            for small in statement.body:
                if type(small) is not cst.ImportFrom or not isinstance(small.names, cst.ImportStar):
                    continue
                prefix = "." * len(small.relative) + (names_mod.dotted(small.module) or "")
                found = self.resolve(importer, prefix)
                if found is None or found.attr:
                    continue
                star = found.facts
                sep = "" if prefix.endswith(".") else "."
                for name, qualified in star.imports.items():
                    if name.startswith("_"):
                        continue
                    if qualified.startswith("."):
                        # what a package's __init__ brings in from its own modules (`from .dataset
                        # import *`), named from the importer: `src.dataset.make_loader`
                        if found.path.name != "__init__.py" or qualified.startswith(".."):
                            continue
                        qualified = f"{prefix}{sep}{qualified[1:]}"
                    names[name] = qualified
                defined = {name.split(".")[0] for name in star.functions}
                names.update({name: f"{prefix}{sep}{name}" for name in defined if not name.startswith("_")})
        return names

    def _lookup(self, importer: Path, qualified: str) -> Lookup:
        """Where `qualified` lives for `importer`, looked up on disk once per run."""
        level = len(qualified) - len(qualified.lstrip("."))
        key = (importer.parent, level, qualified)
        if key not in self._resolved:
            self._resolved[key] = self._locate(importer, level, qualified)
        lookup = self._resolved[key]
        if lookup.found is not None or level:
            return lookup
        # not found where Python looks by default: perhaps where the importer put it on sys.path
        added = self._added_bases(importer)
        if not added:
            return lookup
        if (importer, qualified) not in self._on_sys_path:
            there = self._locate(importer, 0, qualified, added)
            self._on_sys_path[(importer, qualified)] = Lookup(there.found, lookup.absent + there.absent)
        return self._on_sys_path[(importer, qualified)]

    def _added_bases(self, importer: Path) -> list[Path]:
        """The directories the importer, or a project module it imports that touches sys.path
        (`import _init_paths`), adds to sys.path; only once the importer itself was parsed."""
        if importer not in self._sys_path_bases:
            cached = self._cache.get(self.real(importer))
            if cached is None:
                return []  # (asked while its own facts are collected: a star import; not kept)
            text, _, facts = cached
            front, back = import_paths.added_dirs(facts, self.real(importer)) if "sys.path" in text else ([], [])
            consulted = []
            for qualified in {q for q in facts.imports.values() if not q.startswith(".")}:
                located = self._lookup_plain(importer, qualified)
                if located is None or located[1]:
                    continue  # not a project module (a name inside one is no module of its own)
                added = self._module_dirs(located[0])
                if added is not None:
                    consulted.append(located[0])
                    front, back = front + added[0], back + added[1]
            self._sys_path_bases[importer] = ([d for d in front + back if d.is_dir()], consulted)
        bases, consulted = self._sys_path_bases[importer]
        for module in consulted:
            self.facts_for(module)  # (read again for each file whose imports it decides: the cache follows it)
        return bases

    def _module_dirs(self, module: Path) -> tuple[list[Path], list[Path]] | None:
        """What an imported project module adds to sys.path, None when it does not touch it
        (read once per run; parsed only when its text mentions sys.path)."""
        if module not in self._dirs_of_module:
            cached = self._cache.get(self.real(module))  # its text, where it was parsed already
            text = cached[0] if cached is not None else _text(module)
            facts = self.facts_for(module) if "sys.path" in text else None
            self._dirs_of_module[module] = import_paths.added_dirs(facts, self.real(module)) if facts is not None else None
        return self._dirs_of_module[module]

    def _lookup_plain(self, importer: Path, qualified: str) -> tuple[Path, str] | None:
        key = (importer.parent, 0, qualified)
        if key not in self._resolved:
            self._resolved[key] = self._locate(importer, 0, qualified)
        return self._resolved[key].found

    def _locate(self, importer: Path, level: int, qualified: str, bases: list[Path] | None = None) -> Lookup:
        parts = qualified.lstrip(".").split(".") if qualified.lstrip(".") else []
        if bases is None:
            bases = self._bases.get((importer, level))
        if bases is None:
            bases = self._bases[(importer, level)] = self._import_bases(importer, level)
        # The most specific module wins: `utils.utils.is_rank_0` is utils/utils.py's is_rank_0
        # from the project root, not an attribute `utils.is_rank_0` of a utils.py next door.
        found: list[tuple[int, int, Path, str]] = []
        absent: list[Path] = []  # any of these, created, could win
        if not level:  # an __init__.py created here would move the package root the search starts from
            absent.append(self._root_init(importer))
        for rank, base in enumerate(bases):
            if parts:
                holds, would_hold = self._top(base, parts[0])
                if not holds:
                    absent.extend(would_hold)  # either, created, could hold it
                    continue
            for split in range(len(parts), 0, -1):
                module_path, candidates = self._module_file(base, tuple(parts[:split]))
                absent.extend(candidates[: candidates.index(module_path)] if module_path in candidates else candidates)
                if module_path is not None:
                    found.append((len(parts) - split, rank, module_path, ".".join(parts[split:])))
                    break
        if not found:
            return Lookup(None, tuple(absent))
        _, _, module_path, attr = min(found, key=lambda candidate: candidate[:2])
        return Lookup((module_path, attr), tuple(absent))

    def _root_init(self, importer: Path) -> Path:
        if importer not in self._root_inits:
            self._root_inits[importer] = _package_root(self.real(importer).parent) / "__init__.py"
        return self._root_inits[importer]

    def _import_bases(self, importer: Path, level: int) -> list[Path]:
        if level:
            return [self.real(importer).parents[level - 1]] if level <= len(self.real(importer).parents) else []
        # An absolute import resolves from the directory above the outermost package around
        # the importer (the importer's own directory for a plain script), then, as repos
        # are often run from a parent directory, from a few directories further up, and
        # last from the importer's own directory inside a package (`python train.py` there).
        here = self.real(importer).parent
        root = _package_root(here)
        bases = [root, *(p for p in list(here.parents)[:SEARCH_PARENTS] if p != root)]
        if here != root:  # a script run from inside a package imports its neighbours (sys.path[0])
            bases.append(here)
        return bases

    def _top(self, base: Path, top: str) -> tuple[bool, tuple[Path, Path]]:
        """Whether `base` has a package or module named `top` (else no module under that name is
        there: one check per run for the many `torch.*` and `os.*` names a module imports), and
        the paths that would hold it."""
        key = (base, top)
        if key not in self._tops:
            package, module = base / top, base / f"{top}.py"
            self._tops[key] = (package.is_dir() or module.is_file(), (package, module))
        return self._tops[key]

    def _module_file(self, base: Path, parts: tuple[str, ...]) -> tuple[Path | None, tuple[Path, Path]]:
        """The module file for `parts` under `base` (looked up on disk once per run), and the
        files that would hold it, in the order Python tries them."""
        key = (base, parts)
        found = self._files.get(key)
        if found is None:
            candidates = _candidates(base, parts)
            found = self._files[key] = (next((path for path in candidates if path.is_file()), None), candidates)
        return found


def _candidates(base: Path, parts: Sequence[str]) -> tuple[Path, Path]:
    """The files that would hold module `parts` under `base`, in the order Python tries them."""
    candidate = base.joinpath(*parts)
    return candidate.with_suffix(".py"), candidate / "__init__.py"


def _too_complex(text: str, path: Path) -> bool:
    """A helper that nests past the bound is left out, before libcst's parser, which crashes on
    deep nesting as it would on a linted file. Where the tokens bound it, libcst's parse is the
    only one (it refuses a syntax error itself), as for a linted file; otherwise Python's parse
    decides, and the depth is measured on its tree."""
    if limits.within_bounds(text):
        return False
    try:
        limits.check_depth(limits.parse_python(text, str(path)))
    except (SyntaxError, limits.TooComplex):
        return True
    return False


def _package_root(directory: Path) -> Path:
    """The directory that holds the outermost package around `directory` (what is on sys.path)."""
    while (directory / "__init__.py").is_file() and directory.parent != directory:
        directory = directory.parent
    return directory


def _text(path: Path) -> str:
    """The module's source, or "" where it cannot be read (it is then not looked into)."""
    try:
        return read_source(path)
    except SourceError:
        return ""
