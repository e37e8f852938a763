"""Record every file the user's script writes, and redirect it into the rank's scratch tree.

The audit must never create, modify or delete a file of the user's, yet the script's own
checkpoint and logging code has to run for real so that two ranks writing one path can be
seen. Each write-side entry point is wrapped: `open`/`io.open` in a writing mode, `torch.save`
to a path (its zip writer opens the file in C++, past any `open` patch), logging's
FileHandler (it captured `open` at import), and the os calls that create, rename or delete
paths. A path P becomes <scratch>/<P without its root>; later reads of P find the redirected
copy, so a script that reloads its own checkpoint still works.

Paths in the user cache (~/.cache), /dev, /proc and /sys are passed through untouched and not
recorded: libraries write there on every rank by design.
"""

from __future__ import annotations

import builtins
import io
import logging
import os
import sys
from pathlib import Path

_WRITE_MODES = set("wax+")
_OS_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _write_site(skip_dirs: tuple[str, ...], torch_dir: str) -> tuple[bool, str | None]:
    """(is the script's write, file:line of the innermost frame of the user's code).

    Writes that torch makes on its own behalf (compile caches, temp files of its lazy
    imports) are redirected like all others but are not the script's: the innermost frame
    outside ddplint and the standard library is then inside torch.
    """
    f = sys._getframe(2)
    first = site = None
    while f is not None and site is None:
        fn = f.f_code.co_filename
        if not fn.startswith("<"):
            if first is None and (not fn.startswith(skip_dirs) or fn.startswith(torch_dir)):
                first = fn
            if not fn.startswith(skip_dirs):
                site = f"{fn}:{f.f_lineno}"
        f = f.f_back
    return first is None or not first.startswith(torch_dir), site


class WriteRedirector:
    def __init__(self, scratch: Path, skip_dirs: tuple[str, ...], torch_dir: str):
        self.scratch = scratch
        self.skip_dirs = skip_dirs
        self.torch_dir = torch_dir
        self.writes: list[dict] = []
        self._orig: dict[str, object] = {}
        dirs = ["/dev", "/proc", "/sys", os.path.expanduser("~/.cache")]
        self._passthrough = tuple({d.rstrip(os.sep) + os.sep for d in dirs}
                                  | {os.path.realpath(d) + os.sep for d in dirs})
        self._scratch_prefix = str(scratch.parent.parent) + os.sep

    # -- path mapping --

    def _redirect(self, path) -> str | None:
        """The scratch path for a user path, or None when it passes through."""
        try:
            p = os.fspath(path)
        except TypeError:
            return None
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        full = os.path.abspath(p)
        if (full + os.sep).startswith((self._scratch_prefix, *self._passthrough)):
            return None
        return str(self.scratch / full.lstrip(os.sep))

    def _note(self, path, op: str, **extra) -> None:
        ours, site = _write_site(self.skip_dirs, self.torch_dir)
        if ours:
            self.writes.append({"path": os.path.abspath(os.fspath(path)), "op": op, "site": site, **extra})

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

    def _for_write(self, path, op: str) -> str | None:
        target = self._redirect(path)
        if target is not None:
            self._note(path, op)
            self._ensure_dir(os.path.dirname(target))
        return target

    def _for_read(self, path) -> object:
        target = self._redirect(path)
        return target if target is not None and os.path.lexists(target) else path

    # -- wrappers --

    def _open(self, file, mode="r", *args, **kwargs):
        real = self._orig["open"]
        if isinstance(file, int):
            return real(file, mode, *args, **kwargs)
        if _WRITE_MODES & set(mode):
            target = self._for_write(file, "open:" + mode)
            if target is not None:
                src = self._redirect(file)
                if ("a" in mode or "+" in mode) and not os.path.lexists(src) and os.path.isfile(file):
                    # Appending to an existing user file: start from a copy of it.
                    with real(file, "rb") as a, real(target, "wb") as b:
                        b.write(a.read())
                return real(target, mode, *args, **kwargs)
            return real(file, mode, *args, **kwargs)
        return real(self._for_read(file), mode, *args, **kwargs)

    def _os_open(self, path, flags, mode=0o777, *, dir_fd=None):
        real = self._orig["os_open"]
        if dir_fd is None and flags & _OS_WRITE_FLAGS:
            target = self._for_write(path, "os.open")
            if target is not None:
                return real(target, flags, mode)
        elif dir_fd is None:
            return real(self._for_read(path), flags, mode)
        return real(path, flags, mode, dir_fd=dir_fd)

    def _torch_save(self, obj, f, *args, **kwargs):
        real = self._orig["torch_save"]
        if isinstance(f, (str, bytes, os.PathLike)):
            target = self._for_write(f, "torch.save")
            if target is not None:
                return real(obj, target, *args, **kwargs)
        return real(obj, f, *args, **kwargs)

    def _makedirs(self, name, mode=0o777, exist_ok=False):
        target = self._redirect(name)
        if target is None:
            return self._orig["makedirs"](name, mode, exist_ok)
        self._note(name, "makedirs", dir=True)
        if not exist_ok and (os.path.isdir(name) or os.path.isdir(target)):
            raise FileExistsError(17, "File exists", os.fspath(name))
        self._ensure_dir(target)

    def _mkdir(self, path, mode=0o777, *, dir_fd=None):
        target = None if dir_fd is not None else self._redirect(path)
        if target is None:
            return self._orig["mkdir"](path, mode, dir_fd=dir_fd)
        self._note(path, "mkdir", dir=True)
        if os.path.isdir(path) or os.path.isdir(target):
            raise FileExistsError(17, "File exists", os.fspath(path))
        self._ensure_dir(os.path.dirname(target))
        return self._orig["mkdir"](target, mode)

    def _remove(self, path, *, dir_fd=None):
        target = None if dir_fd is not None else self._redirect(path)
        if target is None:
            return self._orig["remove"](path, dir_fd=dir_fd)
        self._note(path, "remove")
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
            s, d = self._redirect(src), self._redirect(dst)
            if d is None:
                return real(src if s is None else self._for_read(src), dst)
            self._note(dst, "os." + key)
            self._ensure_dir(os.path.dirname(d))
            source = self._for_read(src)
            if source == src and s is not None:
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
            "open": builtins.open, "os_open": os.open, "torch_save": torch.save,
            "makedirs": os.makedirs, "mkdir": os.mkdir, "remove": os.remove,
            "unlink": os.unlink, "rename": os.rename, "replace": os.replace,
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
            logging.FileHandler._builtin_open = self._open

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
            logging.FileHandler._builtin_open = self._orig["log_open"]
        self._orig = {}
