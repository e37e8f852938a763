"""Reading a Python file's text the way the interpreter would, with one-line errors."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

MAX_BYTES = 10 * 1024 * 1024  # larger .py files are generated data, not training scripts


class SourceError(Exception):
    """The file cannot be linted; the message is one line for the user."""


def read_source(path: Path) -> str:
    try:
        data = path.read_bytes()
    except PermissionError:
        raise SourceError("cannot read file: permission denied") from None
    except IsADirectoryError:
        raise SourceError("is a directory") from None
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror or exc}") from None
    return decode_source(data)


def decode_source(data: bytes) -> str:
    if len(data) > MAX_BYTES:
        raise SourceError(f"file is larger than {MAX_BYTES // (1024 * 1024)} MiB; skipped")
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
