"""Where code lives: user code versus ddplint, torch and the interpreter, and short names.

Shared by the stack-dump reader and the report so that "the user's frame" means one thing.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig
from functools import lru_cache


def _prefixes(dirs) -> tuple[str, ...]:
    return tuple(sorted({os.path.realpath(d) + os.sep for d in dirs} | {d.rstrip(os.sep) + os.sep for d in dirs}))


@lru_cache(maxsize=1)
def _dirs() -> dict[str, tuple[str, ...]]:
    paths = sysconfig.get_paths()
    packages = [paths[k] for k in ("purelib", "platlib") if paths.get(k)]
    spec = importlib.util.find_spec("torch")
    torch = [list(spec.submodule_search_locations)[0]] if spec and spec.submodule_search_locations else []
    return {
        "ddplint": _prefixes([os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]),
        "stdlib": stdlib_prefixes(os.path.dirname(os.__file__), packages),
        "packages": _prefixes(packages),
        "torch": _prefixes(torch),
    }


def stdlib_prefixes(home: str, packages: list[str]) -> tuple[str, ...]:
    """The standard library's entries under `home`, without the site-packages inside it: outside
    a virtualenv (pyenv, conda, a system Python) torch and every other package live under the
    stdlib's own directory, and their frames are not the standard library's."""
    inside = {os.path.realpath(p) for p in packages}
    try:
        entries = [os.path.join(home, e) for e in os.listdir(home)]
    except OSError:
        return _prefixes([home])
    kept = [e for e in entries if os.path.realpath(e) not in inside]
    files = {e for e in kept if not os.path.isdir(e)}
    return _prefixes(sorted(set(kept) - files)) + tuple(sorted(files | {os.path.realpath(f) for f in files}))


def library_dirs() -> tuple[str, ...]:
    """Directories whose frames are never the user's: ddplint, torch, site-packages, stdlib."""
    d = _dirs()
    return d["ddplint"] + d["stdlib"] + d["packages"] + d["torch"]


def plumbing_dirs() -> tuple[str, ...]:
    """ddplint and the standard library: frames that act for whoever called them."""
    return _dirs()["ddplint"] + _dirs()["stdlib"]


def torch_dirs() -> tuple[str, ...]:
    return _dirs()["torch"]


def is_own_file(filename: str) -> bool:
    """ddplint's own frames, never shown as where a rank stands."""
    return filename.startswith(_dirs()["ddplint"])


def is_user_file(filename: str) -> bool:
    return not filename.startswith("<") and not filename.startswith(library_dirs())


def short(path: str, base: str | None = None) -> str:
    """A path (or path:line) relative to `base` (or the working directory) when inside it."""
    base = base or os.getcwd()
    head, sep, line = path.rpartition(":")
    if not (sep and line.isdigit()):
        head, line = path, ""
    try:
        rel = os.path.relpath(head, base)
    except ValueError:
        rel = head
    shown = head if rel.startswith("..") else rel
    return f"{shown}:{line}" if line else shown
