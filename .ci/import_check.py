"""Import every module of ddplint under the running interpreter (CI runs it under the oldest
Python that pyproject.toml declares), with ddplint's declared dependencies but without the
runtime extra.

torch and numpy are imported only inside the ranks and by the modules that run there; a module
that needs one of them at import is imported again with stand-ins for both, so that what the
interpreter itself lacks (typing.Self, enum.StrEnum, tomllib, ExceptionGroup, new syntax) still
shows. Outside ddplint.runtime nothing may need them: the static path never imports torch.

Exit status 0 when every module imported, 1 otherwise; one line per module that failed.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import traceback
import types
from pathlib import Path

RUNTIME_EXTRA = ("torch", "numpy")  # the packages of the `runtime` extra a module may import at import time
RUNTIME_PACKAGE = "ddplint.runtime"


def _top(name: str | None) -> str:
    return (name or "").partition(".")[0]


class _StandInMeta(type):
    """Any attribute of a stand-in class is another stand-in class; calling one gives a stand-in too."""

    def __getattr__(cls, name: str) -> type:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StandInMeta(name, (), {})

    def __call__(cls, *args: object, **kwargs: object) -> type:
        return _StandInMeta(cls.__name__, (), {})

    def __getitem__(cls, item: object) -> type:
        return cls


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StandInMeta(name, (), {})


class _StandIns(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a stand-in module for torch, numpy and every submodule of theirs."""

    def find_spec(self, fullname, path=None, target=None):
        if _top(fullname) not in RUNTIME_EXTRA:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StandInModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def module_names(package: types.ModuleType) -> list[str]:
    """Every module of the package from its files (pkgutil.walk_packages skips what is under a
    package that fails to import), without __main__."""
    root = Path(package.__path__[0])
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = [package.__name__, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] != "__main__" and all(part.isidentifier() for part in parts):
            names.append(".".join(parts))
    return names


def main() -> int:
    import ddplint  # a missing declared dependency shows here, before any module

    names = module_names(ddplint)
    failed: list[str] = []
    need_extra: list[str] = []
    for name in names:
        try:
            importlib.import_module(name)
            continue
        except ModuleNotFoundError as exc:
            if _top(exc.name) not in RUNTIME_EXTRA:
                failed.append(f"{name}: ModuleNotFoundError: {exc}")
                continue
            missing = exc.name
        except Exception as exc:  # noqa: BLE001 - every failure is reported, not just the first
            failed.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        if not (name == RUNTIME_PACKAGE or name.startswith(RUNTIME_PACKAGE + ".")):
            failed.append(f"{name}: needs {missing} at import, outside {RUNTIME_PACKAGE} (the static path must not)")
            continue
        need_extra.append(name)
        finder = _StandIns()
        before = set(sys.modules)
        sys.meta_path.insert(0, finder)
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001
            failed.append(f"{name} (with torch and numpy stood in): {traceback.format_exc(limit=-1).strip()}")
        finally:
            sys.meta_path.remove(finder)
            for loaded in set(sys.modules) - before:  # nothing imported on stand-ins stays imported
                del sys.modules[loaded]

    version = ".".join(map(str, sys.version_info[:3]))
    print(
        f"import check: {len(names)} modules of ddplint under Python {version}; "
        f"{len(need_extra)} need torch or numpy at import and were imported with stand-ins for them"
        + (f" ({', '.join(need_extra)})" if need_extra else "")
    )
    for line in failed:
        print(f"import check: FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
