"""Where code lives: user code versus ddplint, torch and the interpreter, and short names.

Shared by the stack-dump reader and the report so that "the user's frame" means one thing.
"""

from __future__ import annotations

import importlib.util
import os
import sysconfig
from functools import lru_cache


@lru_cache(maxsize=1)
def library_dirs() -> tuple[str, ...]:
    """Directories whose frames are never the user's: ddplint, torch, site-packages, stdlib."""
    dirs = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.submodule_search_locations:
        dirs.add(list(spec.submodule_search_locations)[0])
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            dirs.add(paths[key])
    return tuple(sorted({os.path.realpath(d) + os.sep for d in dirs} | {d + os.sep for d in dirs}))


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
