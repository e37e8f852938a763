"""Reading a Python file's text the way the interpreter would, with one-line errors.

Only regular files are read, and their size is checked before the first byte: a FIFO named
`x.py` would block forever and a symlink to /dev/zero would grow memory without bound.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tokenize
from pathlib import Path

# What lints in a few seconds: plain code about 3 s of CPU at this size, a dense data literal
# about 6 s (bench/lint_limits.py); the CPU limit stops the slowest shapes. Real training code
# reaches it (Megatron-LM's training.py is 259 KiB); larger .py files are generated data.
NEWLINE = re.compile(r"\r\n|\r|\n")  # Python's line breaks; str.splitlines() also breaks at \f, U+2028, ...


def source_lines(text: str) -> list[str]:
    """The lines of a module as Python and libcst number them."""
    lines = NEWLINE.split(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


MAX_BYTES = 512 * 1024
# A notebook's JSON carries its outputs (images, tables): the cap above applies to its code.
NOTEBOOK_MAX_BYTES = 64 * 1024 * 1024

FILE_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


class SourceError(Exception):
    """The file cannot be linted; the message is one line for the user."""


def not_regular(mode: int) -> str | None:
    """Why a file of this st_mode is not read ("a FIFO"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


class NotRegular(Exception):
    """The path is not a regular file; the argument says what it is ("a FIFO")."""


class TooLarge(Exception):
    """The file is over the limit; the argument is its size in bytes."""


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; OSError, NotRegular or TooLarge.
    The kind and size are checked on the open file, before the first byte is read."""
    # O_NONBLOCK: a FIFO swapped in after a stat must not block the open.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        kind = not_regular(info.st_mode)
        if kind is not None:
            raise NotRegular(kind)
        if info.st_size > limit:
            raise TooLarge(info.st_size)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:  # it grew after the stat
        raise TooLarge(size)
    return b"".join(chunks)


def read_bytes(path: Path, limit: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, or SourceError."""
    try:
        return read_regular(path, limit)
    except PermissionError:
        raise SourceError("cannot read file: permission denied") from None
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror or exc}") from None
    except NotRegular as exc:
        raise SourceError(f"{exc}, not a regular file; skipped") from None
    except TooLarge as exc:
        raise SourceError(too_large("file", exc.args[0], limit)) from None


def too_large(what: str, size: int, limit: int = MAX_BYTES) -> str:
    return f"{what} is {size // 1024} KiB, larger than the {limit // 1024} KiB ddplint lints; skipped"


def read_source(path: Path) -> str:
    return decode_source(read_bytes(path))


def decode_source(data: bytes, limit: int = MAX_BYTES) -> str:
    if len(data) > limit:
        raise SourceError(too_large("file", len(data), limit))
    if b"\x00" in data:
        raise SourceError("file contains a NUL byte; not a Python source file")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        raise SourceError(f"bad encoding declaration: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        where = f"line {line} (byte {exc.start})"
        raise SourceError(
            f"not valid {encoding} at {where}, and no PEP 263 coding declaration says otherwise"
            if encoding == "utf-8"
            else f"not valid {encoding} at {where}"
        ) from None
    except LookupError:
        raise SourceError(f"unknown encoding {encoding!r} in coding declaration") from None
    return text.removeprefix("\ufeff")
