"""Run the job in namespaces of its own: a copy-on-write file system and a process tree the
kernel tears down whole.

`python -m ddplint.runtime.sandbox SPEC` is what the launcher starts instead of torchrun. This
process (the keeper) enters a new user and mount namespace (the user's own uid mapped to
itself: no privilege needed, kernel >= 5.11), then a new PID namespace, and forks its first
process, the init. The init builds the job's whole file system in the run directory and makes
it the job's root (chroot): / under an overlay whose read-only lower layer is the real /, and
every mount of the host put back at its place, a writable one (a data disk, a tmpfs /tmp) under
an overlay of its own. The upper layers lie in ddplint's run directory. Every write, rename,
deletion, truncation, chmod, link, FIFO or database file, wherever it goes, from Python, C, a
subprocess or a spawned child, lands in an upper layer; nothing of it is ever copied back. The
run directory itself is bound into the new root as it is, so the ranks' records reach the
launcher. /dev (GPUs; /dev/shm gets a private tmpfs), /proc, /sys and the network namespace
are the host's own. A writable mount the kernel will not overlay is made read-only to the job
(a write there fails with EROFS), or at worst named as not contained.

The init starts torchrun, reaps every orphan, and when torchrun has exited lists the processes
still running in the namespace (after a grace period: DataLoader workers notice their parent's
exit within seconds), then kills them all and writes the outcome. Killed itself (SIGTERM from
the launcher, or its keeper gone: PR_SET_PDEATHSIG), the init dies and the kernel kills every
process of the namespace: daemons, new sessions and mp.spawn children included.

After the run, `layer_changes` reads the upper layers: each entry is a path the job created,
modified or deleted (an overlay whiteout is a deletion; an opaque directory hides what was
below it).
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_RDONLY, MS_REMOUNT = 1, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1

OUTCOME = "sandbox.json"
LAYERS = "layers"
MAP = "layers.json"  # [[path, layer name]]: which directory each upper layer covers
GRACE_S = 10.0  # how long processes may outlive torchrun before they count as left running
HOST_OWN = ("/proc", "/sys", "/dev")  # bound into the job's root as they are
SHM = "/dev/shm"  # POSIX shared memory: the job gets a tmpfs of its own there
NEW_ROOT = "root"  # in the run directory: where the job's root is built
MACHINERY = ("torchelastic_", "torchinductor_", "pymp-")  # torch's own scratch in the temp directory


class ChangeKind(str, enum.Enum):
    CREATED = "created"
    MODIFIED = "modified"
    DELETED = "deleted"


@dataclass(frozen=True)
class Change:
    path: str
    kind: ChangeKind
    type: str  # file | dir | symlink | fifo | socket | device
    detail: tuple[str, ...] = ()  # for modified: content, mode, owner, times


@dataclass(frozen=True)
class Leftover:
    pid: int  # in the job's PID namespace
    command: str


@dataclass(frozen=True)
class Plan:
    """What the launcher asks of the sandbox: the run directory, where the layers go."""

    roots: tuple[str, ...]  # directories overlaid at their own place (see plan_roots)
    rundir: Path

    @property
    def layers(self) -> Path:
        return self.rundir / LAYERS

    def command(self, job: list[str], cwd: str) -> list[str]:
        spec = self.rundir / "sandbox-spec.json"
        spec.write_text(
            json.dumps({"roots": list(self.roots), "rundir": str(self.rundir), "cwd": cwd, "command": job, "grace_s": GRACE_S})
        )
        return [sys.executable, "-m", "ddplint.runtime.sandbox", str(spec)]


@dataclass
class Outcome:
    """What the init saw; written to the run directory as JSON."""

    returncode: int | None = None
    stopped_by: str | None = None  # the signal that stopped the job early
    leftovers: list[Leftover] = field(default_factory=list)
    processes_visible: bool = True  # /proc of the namespace could be mounted
    covered: list[str] = field(default_factory=list)  # mount points under a copy-on-write layer
    in_memory: list[str] = field(default_factory=list)  # directories rebuilt on a tmpfs (see _Builder)
    memory_changes: list[Change] = field(default_factory=list)  # what the job made or removed there
    read_only: list[str] = field(default_factory=list)  # writable mounts the job saw read-only
    uncontained: list[str] = field(default_factory=list)  # writable mounts the job saw as they are

    @classmethod
    def read(cls, rundir: Path) -> Outcome | None:
        try:
            raw = json.loads((rundir / OUTCOME).read_text())
        except (OSError, ValueError):
            return None
        raw["leftovers"] = [Leftover(**x) for x in raw.get("leftovers", [])]
        raw["memory_changes"] = [
            Change(x["path"], ChangeKind(x["kind"]), x["type"], tuple(x["detail"])) for x in raw.get("memory_changes", [])
        ]
        return cls(**raw)

    def write(self, rundir: Path) -> None:
        tmp = rundir / (OUTCOME + ".tmp")
        tmp.write_text(json.dumps(asdict(self)))
        os.replace(tmp, rundir / OUTCOME)


# ---- directories overlaid at their own place ---------------------------------------------------------------


def _project_root(start: Path) -> Path:
    for d in (start, *start.parents):
        if any((d / marker).exists() for marker in (".git", "pyproject.toml", "setup.py", "setup.cfg")):
            return d
    return start


def _existing_dir(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        p = os.path.dirname(p)
    return p


def within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip(os.sep) + os.sep)


def plan_roots(
    script: Path, script_args: tuple[str, ...], cwd: str, home: str | None, tempdir: str, shared: tuple[str, ...] = ()
) -> list[str]:
    """The directories the job is likely to write below, each to get a copy-on-write layer of
    its own at its place, none inside another (/ itself, the nearest existing directory of an
    output path whose parents do not exist yet, is left to the tree: see _Builder). The whole
    file system is under copy-on-write layers anyway; a layer whose root is the directory
    itself never has to copy that directory or its parents up, which a user namespace cannot
    do for a directory of another user (root's /var/tmp, a shared output tree): the write would
    fail with EOVERFLOW. Beside the project, the working directory, the temp directory and
    $HOME: every path argument (absolute, or relative and leaving the working directory: `--out
    ../runs`), the targets of symlinks in the project (`outputs -> /mnt/scratch/...`), and
    `shared` (the machine's other scratch: see shared_scratch)."""
    project = _project_root(script.resolve().parent)
    wanted = [str(project), cwd, tempdir, home or "", *shared]
    for arg in script_args:
        value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
        if value.startswith(os.sep):
            wanted.append(_existing_dir(value))
        elif value.startswith(os.pardir + os.sep) or value == os.pardir:
            wanted.append(_existing_dir(os.path.join(cwd, value)))
    wanted += _symlink_targets(project)
    real = {os.path.realpath(w) for w in wanted if w}
    roots: list[str] = []
    for r in sorted(real - {os.sep}):
        if not any(within(r, kept) for kept in [*roots, *HOST_OWN]):
            roots.append(r)
    return roots


SYMLINK_SCAN = 20_000  # directory entries looked at for symlinks, from the project root down


def shared_scratch(environ: dict[str, str]) -> tuple[str, ...]:
    """The machine's scratch directories a job may write to wherever it runs: /var/tmp, and the
    XDG cache, data and state directories wherever they were moved."""
    dirs = ["/var/tmp"] + [
        environ[k] for k in ("XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME") if environ.get(k, "").startswith(os.sep)
    ]
    return tuple(d for d in dirs if os.path.isdir(d))


def _symlink_targets(project: Path) -> list[str]:
    """The directories outside the project that its directory symlinks lead to (a data or
    output disk), from a walk bounded by SYMLINK_SCAN entries."""
    targets, seen = [], 0
    for parent, dirs, files in os.walk(project):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in (*dirs, *files):
            seen += 1
            path = os.path.join(parent, name)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if not within(real, str(project)) and os.path.isdir(real):  # (a venv's bin/python: not data)
                    targets.append(real)
        if seen >= SYMLINK_SCAN:
            break
    return targets


# ---- system calls ---------------------------------------------------------------------------
# ---- system calls ---------------------------------------------------------------------------


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = _libc()
    _check(
        libc.mount(
            source.encode(),
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def _enter_namespaces() -> None:
    """A mount namespace (inside a user namespace of its own, with the caller's uid/gid mapped
    to themselves, unless we are root already), then a PID namespace for the children (the
    next fork is its init). Root skips the user namespace where it can: mounts seen from one
    are locked, and an overlay cannot be put over a directory with a locked mount below it."""
    libc = _libc()
    if os.geteuid() == 0 and libc.unshare(CLONE_NEWNS) == 0:
        _check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        return
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare(user, mount)")
    with open("/proc/self/setgroups", "w") as f:
        f.write("deny")
    with open("/proc/self/uid_map", "w") as f:
        f.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as f:
        f.write(f"{gid} {gid} 1")
    _check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
    _mount("none", "/", None, MS_REC | MS_PRIVATE)


def _escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _overlay(root: str, layer: Path, lower: str | None = None) -> None:
    (layer / "upper").mkdir(parents=True, exist_ok=True)
    (layer / "work").mkdir(parents=True, exist_ok=True)
    # userxattr: whiteouts and opaque directories marked with user.* xattrs, which a user
    # namespace may set (with trusted.* a deletion inside a lower directory fails with EIO)
    _mount(
        "overlay",
        root,
        "overlay",
        0,
        f"lowerdir={_escape(lower or root)},upperdir={_escape(str(layer / 'upper'))},"
        f"workdir={_escape(str(layer / 'work'))},userxattr",
    )


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts() -> dict[str, frozenset[str]]:
    """Mount point -> its per-mount options (`ro`, `nosuid`, `relatime`...), the topmost mount
    of each point, as this mount namespace sees them."""
    found: dict[str, frozenset[str]] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            found[_unescape(fields[4])] = frozenset(fields[5].split(","))  # the last (topmost) one wins
    return found


# Per-mount flags that a read-only bind remount must repeat: the kernel refuses to clear one
# that a more privileged namespace set (a locked flag), and a bind remount sets them all at once.
_KEPT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": 1 << 10,
    "nodiratime": 1 << 11,
    "relatime": 1 << 21,
    "strictatime": 1 << 24,
}


@dataclass
class Cover:
    """How the job's root was built from the host's mounts."""

    layers: list[tuple[str, str]] = field(default_factory=list)  # (directory, layer name): copy-on-write
    in_memory: dict[str, dict[str, str]] = field(default_factory=dict)  # rebuilt on a tmpfs: entry -> type
    read_only: list[str] = field(default_factory=list)  # writable mounts or files the job saw read-only
    uncontained: list[str] = field(default_factory=list)  # writable mounts or files the job saw as they are


def _bind_read_only(source: str, target: str, options: frozenset[str]) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)  # (recursive: a mount with locked children must be)
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY
    for name, bit in _KEPT_FLAGS.items():
        if name in options:
            flags |= bit
    _mount("none", target, None, flags)


def _layer_name(path: str) -> str:
    """The same directory gets the same layer in every job of one audit (a restart reuses them)."""
    return hashlib.sha256(path.encode()).hexdigest()[:16]


class _Builder:
    """Builds the job's whole file system at `new` from the host's mounts (read before `new`
    is one of them). A directory goes under a copy-on-write layer whose lower layer is the real
    directory; the mounts below it, hidden by the overlay (it does not cross mount points), and
    the `roots` below it (see plan_roots) are then put in place the same way. /proc, /sys and
    /dev are bound as they are, with everything below them; a read-only mount stays read-only; a
    writable mount the kernel will not overlay is made read-only, or at worst bound as it is and
    named. In a user namespace the
    kernel refuses a lower layer with a mount of the host below it (a locked mount: / itself):
    such a directory is rebuilt on a tmpfs instead, entry by entry (see _rebuild)."""

    def __init__(self, new: str, layers: Path, roots: list[str]):
        self.new, self.layers, self.cover = new, layers, Cover()
        self.mounts = _mounts()
        self.points = set(self.mounts) | set(roots)  # where a layer of its own begins

    def build(self) -> Cover:
        self._put("/", self.new)
        return self.cover

    def _mount_of(self, path: str) -> frozenset[str]:
        return self.mounts[max((m for m in self.mounts if within(path, m)), key=len)]

    def _below(self, path: str) -> list[str]:
        """The outermost mount points and roots strictly below `path`."""
        below = [m for m in self.points if m != path and within(m, path)]
        return sorted(m for m in below if not any(o != m and within(m, o) for o in below))

    def _put_back_below(self, path: str) -> None:
        for point in self._below(path):
            try:
                self._put(point, self.new + point)
            except OSError:
                continue  # not ours to see: the job sees the directory below it, in the layer

    def _put(self, path: str, target: str) -> None:
        if path in HOST_OWN:
            _mount(path, target, None, MS_BIND | MS_REC)
            return
        options = self._mount_of(path)
        if path in self.mounts and "ro" in options:
            _bind_read_only(path, target, options)
        elif not os.path.isdir(path):  # a file bound over a file (a container's /etc/hosts)
            self._seal(path, target, options)
            return
        else:
            try:
                name = _layer_name(path)
                _overlay(target, self.layers / name, lower=path)
                self.cover.layers.append((path, name))
            except OSError:
                if self._below(path):
                    self._rebuild(path, target)
                    return
                self._seal(path, target, options)
                return
        self._put_back_below(path)

    def _rebuild(self, path: str, target: str) -> None:
        """`path` on a tmpfs of the job's own: each subdirectory put in place as above, symlinks
        copied, each file bound read-only (`io.sandbox` says so of the whole directory). The
        job's own new entries directly in `path` stay in memory (see memory_changes)."""
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={stat.S_IMODE(os.stat(path).st_mode):o}")
        made = self.cover.in_memory[path] = {}
        for entry in os.scandir(path):
            inner, there = os.path.join(path, entry.name), os.path.join(target, entry.name)
            try:
                if entry.is_symlink():
                    os.symlink(os.readlink(inner), there)
                elif entry.is_dir():
                    os.mkdir(there)
                    self._put(inner, there)
                elif entry.is_file():
                    open(there, "x").close()
                    self._seal(inner, there, self._mount_of(inner), named=False)
                else:
                    continue  # (a socket, a FIFO, a device node): hidden
                made[entry.name] = _kind_of(os.lstat(there).st_mode)
            except OSError:
                continue  # hidden: the job does not see it

    def _seal(self, path: str, target: str, options: frozenset[str], named: bool = True) -> None:
        """`path` read-only at `target` (named in read_only unless told not to), or where the
        kernel refuses that, as it is (named uncontained)."""
        try:
            _bind_read_only(path, target, options)
            if named:
                self.cover.read_only.append(path)
        except OSError:
            _mount(path, target, None, MS_BIND | MS_REC)
            self.cover.uncontained.append(path)


def unavailable_reason() -> str | None:
    """None when this kernel lets us build the sandbox, else why not (one line). Tried for
    real in a throwaway child: namespaces, an overlay mount and a /proc of its own."""
    import tempfile

    scratch = tempfile.mkdtemp(prefix="ddplint-sandbox-check-")
    read, write = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            os.close(read)
            code = 0
            try:
                _enter_namespaces()
                lower = Path(scratch, "lower")
                lower.mkdir()
                _overlay(str(lower), Path(scratch, "layer"))
                inner = os.fork()
                if inner == 0:
                    try:
                        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                        os._exit(0)
                    except OSError as exc:
                        os.write(write, str(exc).encode())
                        os._exit(1)
                code = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
            except OSError as exc:
                os.write(write, str(exc).encode())
                code = 1
            os._exit(code)
        os.close(write)
        message = b""
        while chunk := os.read(read, 4096):
            message += chunk
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        return None if code == 0 else (message.decode(errors="replace") or f"exit status {code}")
    finally:
        os.close(read)
        remove_tree(Path(scratch))


def remove_tree(path: Path) -> None:
    """rm -rf, also through an overlay work directory (created with mode 000)."""

    def retry(func, p, exc_info):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, ignore_errors=True)
            else:
                func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=retry)


# ---- pids across the namespace boundary -----------------------------------------------------


def pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid_for_children")
    except OSError:
        return None


def outer_pids(namespace: str) -> dict[int, int]:
    """inner pid -> host pid of every process in the PID namespace `namespace`."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/pid") != namespace:
                continue
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        found[int(line.split()[-1])] = int(entry)
                        break
        except (OSError, ValueError):
            continue
    return found


# ---- reading the upper layers ---------------------------------------------------------------


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "file"


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _is_opaque(path: str) -> bool:
    for name in ("trusted.overlay.opaque", "user.overlay.opaque"):
        try:
            if os.getxattr(path, name, follow_symlinks=False) in (b"y", b"x"):
                return True
        except OSError:
            continue
    return False


def _same_bytes(a: str, b: str) -> bool:
    import filecmp

    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _differences(upper: os.stat_result, lower: os.stat_result, upath: str, lpath: str) -> tuple[str, ...]:
    what = []
    if stat.S_IFMT(upper.st_mode) != stat.S_IFMT(lower.st_mode):
        return ("type",)
    if stat.S_ISREG(upper.st_mode) and (upper.st_size != lower.st_size or not _same_bytes(upath, lpath)):
        what.append("content")
    if stat.S_ISLNK(upper.st_mode) and os.readlink(upath) != os.readlink(lpath):
        what.append("target")
    if stat.S_IMODE(upper.st_mode) != stat.S_IMODE(lower.st_mode):
        what.append("mode")
    if (upper.st_uid, upper.st_gid) != (lower.st_uid, lower.st_gid):
        what.append("owner")
    if not stat.S_ISDIR(upper.st_mode) and upper.st_mtime_ns != lower.st_mtime_ns:
        what.append("times")
    return tuple(what)


def _deleted_below(lower: str, upper_dir: str) -> list[Change]:
    """Under an opaque directory: every lower entry the upper does not recreate is gone."""
    gone = []
    for dirpath, dirnames, filenames in os.walk(lower):
        for name in sorted(dirnames + filenames):
            lp = os.path.join(dirpath, name)
            up = os.path.join(upper_dir, os.path.relpath(lp, lower))
            if not os.path.lexists(up):
                gone.append(Change(lp, ChangeKind.DELETED, _kind_of(os.lstat(lp).st_mode)))
        dirnames[:] = [
            d for d in dirnames if os.path.isdir(os.path.join(upper_dir, os.path.relpath(os.path.join(dirpath, d), lower)))
        ]
    return gone


def _machinery(path: str, tempdir: str) -> bool:
    """Scratch of torchrun, torch and multiprocessing in the temp directory: not the script's."""
    if not within(path, tempdir) or path == tempdir:
        return False
    return os.path.relpath(path, tempdir).split(os.sep)[0].startswith(MACHINERY)


def memory_changes(in_memory: dict[str, dict[str, str]]) -> list[Change]:
    """What the job created or deleted directly in the directories rebuilt on a tmpfs (read in
    the job's root, after the job): an entry that was not made at the rebuild, with everything
    below it, or one made then that is gone."""
    changes = []
    for directory, made in in_memory.items():
        try:
            now = {entry.name: entry for entry in os.scandir(directory)}
        except OSError:
            continue
        for name in sorted(now.keys() - made.keys()):
            path = os.path.join(directory, name)
            changes.append(Change(path, ChangeKind.CREATED, _kind_of(now[name].stat(follow_symlinks=False).st_mode)))
            if now[name].is_dir(follow_symlinks=False):
                for dirpath, dirnames, filenames in os.walk(path):
                    for inner in sorted(dirnames + filenames):
                        full = os.path.join(dirpath, inner)
                        changes.append(Change(full, ChangeKind.CREATED, _kind_of(os.lstat(full).st_mode)))
        changes += [
            Change(os.path.join(directory, name), ChangeKind.DELETED, made[name]) for name in sorted(made.keys() - now.keys())
        ]
    return changes


def layer_changes(layers: Path, tempdir: str) -> list[Change]:
    """Every path the job created, modified or deleted, from the upper layers."""
    tempdir = os.path.realpath(tempdir)
    changes: list[Change] = []
    try:
        covered = json.loads((layers / MAP).read_text())
    except (OSError, ValueError):
        return changes  # the job never started: nothing written
    for root, name in covered:
        upper = layers / name / "upper"
        if not upper.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(upper):
            for name in sorted(dirnames + filenames):
                upath = os.path.join(dirpath, name)
                real = os.path.join(root, os.path.relpath(upath, upper))
                if _machinery(real, tempdir):
                    continue
                try:
                    ust = os.lstat(upath)
                except OSError:
                    continue
                lst = os.lstat(real) if os.path.lexists(real) else None
                if _is_whiteout(ust):
                    if lst is not None:
                        changes.append(Change(real, ChangeKind.DELETED, _kind_of(lst.st_mode)))
                    continue
                if lst is None:
                    changes.append(Change(real, ChangeKind.CREATED, _kind_of(ust.st_mode)))
                    continue
                if stat.S_ISDIR(ust.st_mode) and _is_opaque(upath) and stat.S_ISDIR(lst.st_mode):
                    changes += _deleted_below(real, upath)
                diff = _differences(ust, lst, upath, real)
                if diff:
                    changes.append(Change(real, ChangeKind.MODIFIED, _kind_of(ust.st_mode), diff))
    return sorted(changes, key=lambda c: c.path)


def put_back(layers: Path, path: str, source: str) -> bool:
    """Make `path`, as the next job under these layers sees it, a copy of `source`: written into
    the upper layer that covers it, while no job has it mounted. False where no layer covers it."""
    try:
        covered = json.loads((layers / MAP).read_text())
    except (OSError, ValueError):
        return False
    real = os.path.realpath(path)
    roots = [(root, name) for root, name in covered if within(real, root)]
    if not roots:
        return False
    root, name = max(roots, key=lambda r: len(r[0]))
    upper = layers / name / "upper" / os.path.relpath(real, root)
    try:
        upper.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(upper):
            upper.unlink()  # the later version, or the whiteout of a deletion
        shutil.copyfile(source, upper)
    except OSError:
        return False
    return True


# ---- the keeper and the init ----------------------------------------------------------------


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum, frame):
    raise _Stop(signum)


def _reap_all(block: bool) -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _others() -> list[Leftover] | None:
    """Live processes of this namespace besides the init (None when /proc is not ours)."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit() or entry == "1":
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError):
            continue
        found.append(Leftover(int(entry), command))
    return sorted(found, key=lambda x: x.pid)


def _distinct_pids(keeper: int) -> None:
    """Start this namespace's pids after the keeper's host pid: torchrun's c10d rendezvous tells
    agents apart by host name and pid, and two sandboxed agents on one host would otherwise
    both be pid 2 and count as one node (best effort: without it, pids start at 2)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(keeper))
    except OSError:
        pass


def _private_shm(new: str) -> list[str]:
    """A tmpfs of the job's own over /dev/shm (shared memory, DataLoader workers' and NCCL's
    segments): what the job leaves there goes with the namespace. Returns /dev/shm when it
    could not be mounted (it then stays the host's)."""
    if not os.path.isdir(SHM):
        return []
    try:
        _mount("tmpfs", new + SHM, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    except OSError:
        return [SHM]
    return []


def _init(spec: dict, keeper: int) -> int:
    """PID 1 of the job's namespace."""
    _libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the keeper gone: the namespace goes
    rundir = Path(spec["rundir"])
    outcome = Outcome()
    in_memory: dict[str, dict[str, str]] = {}  # (read after the job, once in the job's root)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _raise_stop)
    try:
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError:
            outcome.processes_visible = False
        new = rundir / NEW_ROOT
        new.mkdir(exist_ok=True)  # (a restart builds it again)
        cover = _Builder(str(new), rundir / LAYERS, spec["roots"]).build()
        outcome.covered = [point for point, _ in cover.layers]
        outcome.in_memory = list(cover.in_memory)
        outcome.read_only = cover.read_only
        outcome.uncontained = cover.uncontained + _private_shm(str(new))
        _mount(str(rundir), f"{new}{rundir}", None, MS_BIND)  # the records and layers reach the launcher
        (rundir / LAYERS / MAP).write_text(json.dumps(cover.layers))
        os.chroot(new)
        in_memory = cover.in_memory
        os.chdir(spec["cwd"])  # the working directory, seen through its overlay
        if outcome.processes_visible:
            _distinct_pids(keeper)
        job = subprocess.Popen(spec["command"])
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == job.pid:
                outcome.returncode = os.waitstatus_to_exitcode(status)
                job.returncode = outcome.returncode
                break
        deadline = time.monotonic() + spec.get("grace_s", GRACE_S)
        while True:
            _reap_all(block=False)
            left = _others()
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if left:
            outcome.leftovers = left
    except _Stop as stop:
        outcome.stopped_by = signal.Signals(stop.signum).name
    except OSError as exc:
        print(f"ddplint: sandbox: {exc}", file=sys.stderr, flush=True)
        outcome.returncode = 125
    finally:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        if os.getpid() == 1:  # only ever inside the namespace
            try:
                os.kill(-1, signal.SIGKILL)  # every process of the namespace but this one
            except ProcessLookupError:
                pass  # none left
            _reap_all(block=True)
    outcome.memory_changes = memory_changes(in_memory)
    outcome.write(rundir)
    if outcome.stopped_by:
        return 128 + signal.Signals[outcome.stopped_by].value
    return outcome.returncode if outcome.returncode is not None else 125


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    try:
        _enter_namespaces()
    except OSError as exc:
        print(f"ddplint: sandbox: {exc}", file=sys.stderr, flush=True)
        os._exit(125)
    keeper = os.getpid()  # (a host pid: the keeper itself stays in the host's PID namespace)
    child = os.fork()
    if child == 0:
        code = 125
        try:
            code = _init(spec, keeper)
        except BaseException:  # noqa: BLE001 - told in the job's log, the keeper exits 125
            import traceback

            traceback.print_exc()
        finally:
            os._exit(code)

    def forward(signum, frame):
        try:
            os.kill(child, signum)
        except ProcessLookupError:
            pass

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, forward)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 125 << 8
            break
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 125)


if __name__ == "__main__":
    main()
