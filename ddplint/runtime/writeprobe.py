"""Record every file the user's script writes, and (outside the sandbox) redirect it into the
rank's scratch tree.

Inside the sandbox (ddplint.runtime.sandbox) the kernel's copy-on-write layer already keeps
every write off the user's disk, whatever makes it; there the probe only records which rank
wrote which path from which line (`redirect=False`), and writes go where the script says.
Without the sandbox the redirection below is the only protection, and it covers only Python's
own file calls.

The audit must never create, modify or delete a file of the user's, yet the script's own
checkpoint and logging code has to run for real so that two ranks writing one path can be
seen. Each write-side entry point is wrapped: `open`/`io.open` in a writing mode, `os.open`
with a writing flag, `torch.save` to a path (its zip writer opens the file in C++, past any
`open` patch), logging's FileHandler (it captured `open` at import), the os calls that
create, rename or delete paths, and torch.distributed.checkpoint's save (wrapped when the script
imports it: the import costs every rank more than half a second). A path P becomes <scratch>/<P without its root>; later reads
of P find the redirected copy, so a script that reloads its own checkpoint still works.

Who writes decides the rest. The innermost frame outside ddplint and the standard library is
the writer: the user's code, or a library. A library's writes into the system temp directory
or ~/.cache pass through untouched and unrecorded (multiprocessing binds sockets in temp
directories it creates, torch keeps its compile caches there); /dev, /proc and /sys always
pass through. Writes by torch itself (caches outside the temp directory) are redirected but
not recorded: they are not the script's.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import importlib.abc
import importlib.machinery
import io
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from ddplint.lint.vocabulary import COLLECTIVE_SAVES, DCP
from ddplint.runtime.sites import is_user_file, plumbing_dirs, torch_dirs

DCP_MODULE = DCP
DCP_SAVES = sorted(name.rpartition(".")[2] for name in COLLECTIVE_SAVES if name.rpartition(".")[0] == DCP)
_WRITE_MODES = set("wax+")
_OS_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _prefixes(dirs: list[str]) -> tuple[str, ...]:
    return tuple({d.rstrip(os.sep) + os.sep for d in dirs} | {os.path.realpath(d) + os.sep for d in dirs})


def _writer() -> tuple[str | None, str | None]:
    """(file of the frame that made this write, file:line of the innermost user frame)."""
    quiet = plumbing_dirs()
    f: FrameType | None = sys._getframe(2)
    first = site = None
    while f is not None and site is None:
        fn = f.f_code.co_filename
        if not fn.startswith("<"):
            if first is None and not fn.startswith(quiet):
                first = fn
            if is_user_file(fn):
                site = f"{fn}:{f.f_lineno}"
        f = f.f_back
    return first, site


def _move_directory(src, dst) -> None:
    """What rename(2) does, for a directory the sandbox's overlay will not rename (EXDEV: it
    comes from the layer below): copy it, then delete it. An empty directory at `dst` is
    replaced, a full one fails as rename would (ENOTEMPTY)."""
    if os.path.isdir(dst) and not os.path.islink(dst):
        os.rmdir(dst)
    shutil.copytree(src, dst, symlinks=True)
    shutil.rmtree(src)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` once the module `name` has been executed, wherever it is imported."""

    def __init__(self, name: str, then) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if isinstance(loader, importlib.machinery.SourceFileLoader | importlib.machinery.SourcelessFileLoader):
            execute = loader.exec_module

            def exec_module(module) -> None:
                execute(module)
                self.then(module)

            loader.exec_module = exec_module  # this module's own loader
        return spec


class WriteRedirector:
    def __init__(self, scratch: Path, redirect: bool = True, on_torch_save=None, position=None, keep_dir: Path | None = None):
        self.scratch = scratch
        self.redirect = redirect
        self.on_torch_save = on_torch_save  # called before every torch.save (the checkpoint read-back)
        self.position = position  # () -> where the training loader is, noted with each write (a restart's start)
        self.keep_dir = keep_dir  # where the first version of each path saved with torch.save is copied
        self.kept: dict[str, str] = {}  # path -> its first version's copy
        self.writes: list[dict] = []
        self._orig: dict[str, Any] = {}  # the functions the patches replaced, by name
        self._dcp: dict[str, Any] = {}  # torch.distributed.checkpoint's saves, once wrapped
        self._dcp_hook: _AfterImport | None = None
        self._always = _prefixes(["/dev", "/proc", "/sys", str(scratch.parent.parent)])
        self._library_areas = _prefixes([tempfile.gettempdir(), os.path.expanduser("~/.cache")])

    # -- path mapping --

    def _scratch_path(self, path) -> str | None:
        try:
            p = os.fspath(path)
        except TypeError:
            return None
        full = os.path.abspath(os.fsdecode(p))
        if (full + os.sep).startswith(self._always):
            return None
        return str(self.scratch / full.lstrip(os.sep))

    def _for_write(self, path, op: str, **extra) -> str | None:
        """The scratch path to use instead of `path`, or None to let the write through."""
        target = self._scratch_path(path)
        if target is None:
            return None
        first, site = _writer()
        by_library = first is not None and not is_user_file(first)
        full = os.path.abspath(os.fsdecode(os.fspath(path)))
        if by_library and (full + os.sep).startswith(self._library_areas):
            if not self.redirect:  # noted for the sandbox's report, never a single-writer finding
                self.writes.append({"path": full, "op": op, "site": site, "library": True, **extra})
            return None
        if not (by_library and first is not None and first.startswith(torch_dirs())):
            at = self.position() if self.position is not None else None
            self.writes.append({"path": full, "op": op, "site": site, **extra, **({"at": list(at)} if at else {})})
        if not self.redirect:
            return None
        self._ensure_dir(os.path.dirname(target))
        return target

    def readable(self, path) -> str:
        """Where this rank reads `path` now: its redirected copy when there is one."""
        return os.fspath(self._for_read(path))

    def _for_read(self, path):
        if not self.redirect:
            return path
        target = self._scratch_path(path)
        return target if target is not None and os.path.lexists(target) else path

    def _ensure_dir(self, path: str) -> None:
        """mkdir -p inside the scratch tree with the real os.mkdir (os.makedirs would call
        the patched one back for every parent)."""
        missing = []
        while not os.path.isdir(path) and path != os.path.dirname(path):
            missing.append(path)
            path = os.path.dirname(path)
        for p in reversed(missing):
            try:
                self._orig["mkdir"](p)
            except FileExistsError:
                pass

    # -- wrappers --

    def _open(self, file, mode="r", *args, **kwargs):
        real = self._orig["open"]
        if isinstance(file, int):
            return real(file, mode, *args, **kwargs)
        if not _WRITE_MODES & set(mode):
            return real(self._for_read(file), mode, *args, **kwargs)
        target = self._for_write(file, "open:" + mode)
        if target is None:
            return real(file, mode, *args, **kwargs)
        if ("a" in mode or "+" in mode) and not os.path.lexists(target) and os.path.isfile(file):
            with real(file, "rb") as a, real(target, "wb") as b:  # start from the user's content
                b.write(a.read())
        return real(target, mode, *args, **kwargs)

    def _os_open(self, path, flags, mode=0o777, *, dir_fd=None):
        real = self._orig["os_open"]
        if dir_fd is not None:
            return real(path, flags, mode, dir_fd=dir_fd)
        if flags & _OS_WRITE_FLAGS:
            target = self._for_write(path, "os.open")
            return real(path if target is None else target, flags, mode)
        return real(self._for_read(path), flags, mode)

    def _torch_save(self, obj, f, *args, **kwargs):
        if self.on_torch_save is not None:
            with contextlib.suppress(Exception):
                self.on_torch_save()
        if not isinstance(f, (str, bytes, os.PathLike)):
            return self._orig["torch_save"](obj, f, *args, **kwargs)
        target = self._for_write(f, "torch.save")
        saved = self._orig["torch_save"](obj, f if target is None else target, *args, **kwargs)
        self._keep(os.path.abspath(os.fsdecode(os.fspath(f))), f if target is None else target)
        return saved

    def _wrap_dcp(self, module) -> None:
        """torch.distributed.checkpoint's saves, noted as one collective write of the checkpoint
        directory: every rank writes its own shard file in it, the coordinator the metadata (the
        files themselves are torch's writes: redirected, not recorded)."""
        for name in DCP_SAVES:
            orig = getattr(module, name, None)
            if orig is None:
                continue
            self._dcp[name] = orig

            @functools.wraps(orig)
            def save(*args, _orig=orig, **kwargs):
                writer = kwargs.get("storage_writer") or (args[1] if len(args) > 1 else None)
                where = kwargs.get("checkpoint_id") or getattr(writer, "path", None)
                if self.on_torch_save is not None:
                    with contextlib.suppress(Exception):
                        self.on_torch_save()
                if isinstance(where, (str, os.PathLike)):
                    self._for_write(where, "dcp.save", collective=True)
                return _orig(*args, **kwargs)

            setattr(module, name, save)

    def _keep(self, path: str, written) -> None:
        """A copy of the file's first version: a restart starts from it, as after an interruption
        right after the first checkpoint."""
        if self.keep_dir is None or path in self.kept:
            return
        copy = self.keep_dir / str(len(self.kept))
        with contextlib.suppress(OSError):
            self._ensure_dir(str(self.keep_dir))
            real = self._orig["open"]
            with real(written, "rb") as src, real(copy, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            self.kept[path] = str(copy)

    def _makedirs(self, name, mode=0o777, exist_ok=False):
        target = self._for_write(name, "makedirs", dir=True)
        if target is None:
            return self._orig["makedirs"](name, mode, exist_ok)
        if not exist_ok and (os.path.isdir(name) or os.path.isdir(target)):
            raise FileExistsError(17, "File exists", os.fspath(name))
        self._ensure_dir(target)

    def _mkdir(self, path, mode=0o777, *, dir_fd=None):
        target = None if dir_fd is not None else self._for_write(path, "mkdir", dir=True)
        if target is None:
            return self._orig["mkdir"](path, mode, dir_fd=dir_fd)
        if os.path.isdir(path) or os.path.isdir(target):
            raise FileExistsError(17, "File exists", os.fspath(path))
        return self._orig["mkdir"](target, mode)

    def _remove(self, path, *, dir_fd=None):
        target = None if dir_fd is not None else self._for_write(path, "remove")
        if target is None:
            return self._orig["remove"](path, dir_fd=dir_fd)
        if os.path.lexists(target):
            return self._orig["remove"](target)
        if not os.path.lexists(path):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return None  # the user's own file stays; the script believes it is gone

    def _rename_like(self, key: str):
        def wrapper(src, dst, *, src_dir_fd=None, dst_dir_fd=None):
            real = self._orig[key]
            if src_dir_fd is not None or dst_dir_fd is not None:
                return real(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
            d = self._for_write(dst, "os." + key)
            source = self._for_read(src)
            if d is None:
                try:
                    return real(source, dst)
                except OSError as exc:
                    if exc.errno != errno.EXDEV or not os.path.isdir(source) or os.path.islink(source):
                        raise
                    return _move_directory(source, dst)
            if source is src and self._scratch_path(src) is not None and os.path.isfile(src):
                # The source is a user file: copy it rather than move it away.
                with self._orig["open"](src, "rb") as a, self._orig["open"](d, "wb") as b:
                    b.write(a.read())
                return None
            return real(source, d)

        return wrapper

    # -- installation --

    def install(self) -> None:
        import torch

        self._orig = {
            "open": builtins.open,
            "os_open": os.open,
            "torch_save": torch.save,
            "makedirs": os.makedirs,
            "mkdir": os.mkdir,
            "remove": os.remove,
            "unlink": os.unlink,
            "rename": os.rename,
            "replace": os.replace,
            "log_open": logging.FileHandler.__dict__.get("_builtin_open"),
        }
        builtins.open = io.open = self._open
        os.open = self._os_open
        torch.save = self._torch_save
        os.makedirs = self._makedirs
        os.mkdir = self._mkdir
        os.remove = os.unlink = self._remove
        os.rename = self._rename_like("rename")
        os.replace = self._rename_like("replace")
        if self._orig["log_open"] is not None:
            logging.FileHandler._builtin_open = self._open  # type: ignore[attr-defined]  # private, not in the stubs
        if DCP_MODULE in sys.modules:
            self._wrap_dcp(sys.modules[DCP_MODULE])
        else:
            self._dcp_hook = _AfterImport(DCP_MODULE, self._wrap_dcp)
            sys.meta_path.insert(0, self._dcp_hook)

    def uninstall(self) -> None:
        import torch

        if not self._orig:
            return
        builtins.open = io.open = self._orig["open"]
        os.open = self._orig["os_open"]
        torch.save = self._orig["torch_save"]
        os.makedirs = self._orig["makedirs"]
        os.mkdir = self._orig["mkdir"]
        os.remove = self._orig["remove"]
        os.unlink = self._orig["unlink"]
        os.rename = self._orig["rename"]
        os.replace = self._orig["replace"]
        if self._orig["log_open"] is not None:
            logging.FileHandler._builtin_open = self._orig["log_open"]  # type: ignore[attr-defined]  # (as above)
        if self._dcp_hook is not None and self._dcp_hook in sys.meta_path:
            sys.meta_path.remove(self._dcp_hook)
        module = sys.modules.get(DCP_MODULE)
        for name, orig in self._dcp.items():
            setattr(module, name, orig)
        self._dcp = {}
        self._orig = {}
