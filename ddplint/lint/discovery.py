"""Which files a run lints: the .py, .pyi and .ipynb files named or found under the paths.

A directory walk skips hidden directories, the configured excludes and, by default, what
git ignores (one `git ls-files` per walked directory, so the rules are git's own: nested
.gitignore files, negations, the global excludes file). Files named on the command line are
linted even when excluded or ignored, unless --force-exclude says otherwise.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ddplint.config import Config
from ddplint.diagnostics import FileError
from ddplint.lint.source import not_regular

SUFFIXES = (".py", ".pyi", ".ipynb")
GIT_TIMEOUT = 30.0


@dataclass(frozen=True)
class SourceFile:
    path: Path
    size: int  # bytes, from the walk's stat: what the work is planned by


def discover_sources(paths: Sequence[Path], config: Config) -> tuple[list[SourceFile], list[FileError]]:
    """The files to lint, in a stable order, and the paths that could not be used."""
    files: list[SourceFile] = []
    errors: list[FileError] = []
    for path in paths:
        try:
            info = path.stat()
        except OSError as exc:
            if path.is_symlink():
                errors.append(FileError(str(path), "broken symbolic link or symlink loop"))
            elif isinstance(exc, PermissionError):
                errors.append(FileError(str(path), "cannot access: permission denied"))
            elif isinstance(exc, FileNotFoundError):
                errors.append(FileError(str(path), "no such file or directory"))
            else:
                errors.append(FileError(str(path), f"cannot access: {exc.strerror or exc}"))
            continue
        if stat.S_ISDIR(info.st_mode):
            if config.is_excluded(path) and os.path.realpath(path) != os.path.realpath(config.root):
                continue
            files.extend(_walk(path, config, errors))
        elif config.force_exclude and config.is_excluded(path):
            continue
        elif not_regular(info.st_mode) is not None:
            errors.append(FileError(str(path), f"{not_regular(info.st_mode)}, not a regular file; skipped"))
        else:
            files.append(SourceFile(path, info.st_size))
    unique = {f.path: f for f in files}
    return list(unique.values()), errors


def _walk(root: Path, config: Config, errors: list[FileError]) -> Iterable[SourceFile]:
    def on_error(exc: OSError) -> None:
        reason = "permission denied" if isinstance(exc, PermissionError) else exc.strerror
        errors.append(FileError(exc.filename or str(root), f"cannot list directory: {reason}"))

    ignored = git_ignored(root) if config.respect_gitignore else frozenset()
    for directory, dirnames, filenames in os.walk(root, onerror=on_error):
        base = Path(directory)
        rel_base = config.relative(directory)  # one realpath per directory
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and not _excluded(config, directory, rel_base, d) and (base / d) not in ignored
        )
        for name in sorted(filenames):
            path = base / name
            if name.endswith(SUFFIXES) and path not in ignored and not _excluded(config, directory, rel_base, name):
                try:
                    info = path.stat()
                except OSError as exc:
                    errors.append(FileError(str(path), f"cannot access: {exc.strerror or exc}"))
                    continue
                kind = not_regular(info.st_mode)
                if kind is not None:
                    errors.append(FileError(str(path), f"{kind}, not a regular file; skipped"))
                    continue
                yield SourceFile(path, info.st_size)


def _excluded(config: Config, directory: str, rel_base: str, name: str) -> bool:
    """An entry that is not a symlink resolves to its directory's real path plus its name."""
    path = os.path.join(directory, name)
    if os.path.islink(path):
        return config.is_excluded(Path(path))
    return config.is_excluded_relative(name if rel_base == "." else f"{rel_base}/{name}")


def git_ignored(root: Path) -> frozenset[Path]:
    """Files and directories under `root` that git ignores; empty outside a work tree or without git."""
    git = shutil.which("git")
    if git is None:
        return frozenset()
    try:
        proc = subprocess.run(
            [git, "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
            cwd=root,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    if proc.returncode != 0:  # not a git work tree
        return frozenset()
    return frozenset(root / name.rstrip("/") for name in proc.stdout.decode("utf-8", "surrogateescape").split("\0") if name)


def discover(paths: Sequence[Path], config: Config) -> tuple[list[Path], list[FileError]]:
    """The paths of the files to lint, and the paths that could not be used."""
    files, errors = discover_sources(paths, config)
    return [f.path for f in files], errors
