"""What /proc says about other processes: command lines, environments, sockets, ancestry.

Linux only; elsewhere every function answers "nothing known", and the checks say so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
AGENT_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass
class Proc:
    pid: int
    ppid: int
    argv: list[str]
    age_s: float | None

    @property
    def command(self) -> str:
        return " ".join(self.argv) if self.argv else "?"

    @property
    def short(self) -> str:
        """What a person would call it: "torchrun", "python train.py", "nginx"."""
        if is_agent(self.argv):
            return "torchrun"
        if not self.argv:
            return "?"
        head = self.argv[0].rsplit("/", 1)[-1]
        if head.startswith("python") and len(self.argv) > 1:
            if self.argv[1] == "-m" and len(self.argv) > 2:
                return f"python -m {self.argv[2]}"
            return f"python {self.argv[1].rsplit('/', 1)[-1]}"
        return head


def is_agent(argv: list[str]) -> bool:
    """A torchrun (elastic agent) process, however it was started."""
    heads = [a.rsplit("/", 1)[-1] for a in argv[:2]]
    if "torchrun" in heads:
        return True
    return any(a == "-m" and argv[k + 1] in AGENT_MODULES for k, a in enumerate(argv[:-1])) or any(
        a.endswith(("torch/distributed/run.py", "torch/distributed/launch.py")) for a in argv[:3]
    )


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _uptime() -> float | None:
    raw = _read(PROC / "uptime")
    return float(raw.split()[0]) if raw else None


def process(pid: int, uptime: float | None = None) -> Proc | None:
    stat = _read(PROC / str(pid) / "stat")
    if stat is None:
        return None
    # the command name may hold spaces and parentheses: fields start after the last ")"
    fields = stat[stat.rfind(b")") + 2 :].split()
    ppid, start_ticks = int(fields[1]), int(fields[19])
    uptime = _uptime() if uptime is None else uptime
    age = uptime - start_ticks / os.sysconf("SC_CLK_TCK") if uptime is not None else None
    raw = _read(PROC / str(pid) / "cmdline") or b""
    argv = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return Proc(pid, ppid, argv, age)


def processes() -> list[Proc]:
    if not PROC.is_dir():
        return []
    uptime = _uptime()
    out = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            p = process(int(entry.name), uptime)
            if p is not None:
                out.append(p)
    return out


def environ_of(pid: int) -> dict[str, str] | None:
    """Another process's environment; None when it belongs to another user."""
    raw = _read(PROC / str(pid) / "environ")
    if raw is None:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def ancestors(pid: int) -> set[int]:
    out = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        p = process(pid)
        if p is None:
            break
        pid = p.ppid
    return out


def descendants(root: int, procs: list[Proc]) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def listening_inodes(port: int) -> set[int]:
    """Socket inodes of TCP listeners on `port` (IPv4 and IPv6)."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        raw = _read(PROC / "net" / table)
        if raw is None:
            continue
        for line in raw.decode().splitlines()[1:]:
            cols = line.split()
            local, state, inode = cols[1], cols[3], int(cols[9])
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(inode)
    return inodes


def socket_owners(inodes: set[int]) -> list[int]:
    """Pids with one of these socket inodes open (only the processes we may inspect)."""
    if not inodes or not PROC.is_dir():
        return []
    targets = {f"socket:[{i}]" for i in inodes}
    owners = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(fd) in targets:
                    owners.append(int(entry.name))
                    break
            except OSError:
                continue
    return sorted(owners)


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes = int(seconds // 60)
    if minutes < 1:
        return f"{seconds:.0f} s"
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
