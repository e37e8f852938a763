"""How each rank's process ended, read from torchrun's own failure summary.

A rank killed by a signal (the kernel's OOM killer sends SIGKILL, a native crash raises
SIGSEGV) runs no Python afterwards: it writes no record, and its peers fail a moment later
with "Connection closed by peer". Blaming the first peer that raised would name a consequence,
so the audit reads the exit status torchrun saw for every failed rank, and the processes
torchrun itself stopped with its closing signal once it noticed a failure.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

# torchrun's summary, one block per failed rank:
#   rank      : 1 (local_rank: 1)
#   exitcode  : -9 (pid: 5354)
_FAILURE = re.compile(
    r"rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*\d+\)\s*\n\s*"
    r"exitcode\s*:\s*(?P<code>-?\d+)\s*\(pid:\s*(?P<pid>\d+)\)"
)
# "Sending process 5353 closing signal SIGTERM": torchrun stopping the survivors
_CLOSING = re.compile(r"Sending process (?P<pid>\d+) closing signal")

_WHY = {
    signal.SIGKILL: (
        "was killed by SIGKILL, often the kernel's out-of-memory killer",
        (
            "look for 'Killed process' in the kernel log (dmesg -T); lower the batch size, the "
            "DataLoader's num_workers or prefetch_factor, or give the job more memory"
        ),
    ),
    signal.SIGSEGV: (
        ("crashed with SIGSEGV (a fault in native code: an extension, a driver, a library built for another torch)"),
        "rerun with PYTHONFAULTHANDLER=1 to see the Python line of the crash",
    ),
    signal.SIGBUS: (
        "died of SIGBUS, often shared memory running out (/dev/shm) for DataLoader workers",
        "give the job a larger /dev/shm (docker run --shm-size), or lower num_workers",
    ),
    signal.SIGABRT: (
        "aborted (SIGABRT: a C++ assertion, or a CUDA or NCCL abort)",
        "the rank's last output above names the assertion",
    ),
}


@dataclass(frozen=True)
class Exit:
    """A rank torchrun reported as failed."""

    rank: int
    code: int  # the exit status; negative: killed by signal -code
    pid: int

    @property
    def signal(self) -> signal.Signals | None:
        try:
            return signal.Signals(-self.code) if self.code < 0 else None
        except ValueError:
            return None

    def what(self) -> str:
        sig = self.signal
        name = sig.name if sig else f"signal {-self.code}"
        return f"rank {self.rank} " + (_WHY[sig][0] if sig in _WHY else f"was killed by {name}")

    def fix(self) -> str | None:
        sig = self.signal
        return _WHY[sig][1] if sig in _WHY else None


def failed_exits(log: str) -> list[Exit]:
    """Every failed rank in torchrun's summary, the root cause (printed last) first."""
    exits = [Exit(int(m["rank"]), int(m["code"]), int(m["pid"])) for m in _FAILURE.finditer(log)]
    if "Root Cause" in log and exits:
        exits.insert(0, exits.pop())
    return exits


def killed_on_their_own(log: str) -> list[Exit]:
    """Ranks that died of a signal torchrun did not send: the failure started there."""
    closed = {int(m["pid"]) for m in _CLOSING.finditer(log)}
    return [e for e in failed_exits(log) if e.signal not in (None, signal.SIGTERM, signal.SIGINT) and e.pid not in closed]
