"""The ranks' own stdout and stderr.

torchrun writes each rank's two streams into files of the run directory (`--log-dir RUNDIR/logs
--redirects 3`: <run id>/attempt_<n>/<local rank>/stdout.log and stderr.log), C-level output
included. Under -v they are streamed to ddplint's stderr as they grow, each line prefixed by its
rank; the report quotes the last lines of the ranks that failed and keeps both streams of every
rank (the last CAP bytes of each) in the JSON report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

CAP = 1 << 20  # bytes kept per stream in the JSON report
STREAMS = ("stdout", "stderr")


@dataclass(frozen=True)
class RankOutput:
    rank: int
    stdout: str
    stderr: str
    truncated: bool  # a stream was longer than CAP: its beginning is left out

    def last_lines(self, n: int) -> list[str]:
        """The last n non-blank lines of stderr, else of stdout."""
        for text in (self.stderr, self.stdout):
            lines = [line for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-n:]
        return []


class OutputReader:
    """Follows the per-rank files; `poll` streams what is new when a stream is given."""

    def __init__(self, logs: Path, first_rank: int, stream: TextIO | None = None):
        self.logs = logs
        self.first_rank = first_rank  # global rank of local rank 0 on this node
        self.stream = stream
        self._offsets: dict[Path, int] = {}
        self._partial: dict[Path, bytes] = {}

    def _files(self) -> dict[tuple[int, str], Path]:
        found: dict[tuple[int, str], Path] = {}
        for path in sorted(self.logs.glob("*/attempt_*/*/std*.log")):  # the last attempt wins
            if path.parent.name.isdigit() and path.stem in STREAMS:
                found[(int(path.parent.name), path.stem)] = path
        return found

    def poll(self, final: bool = False) -> None:
        if self.stream is None:
            return
        for (local, _kind), path in sorted(self._files().items()):
            try:
                with open(path, "rb") as f:
                    f.seek(self._offsets.get(path, 0))
                    data = f.read()
            except OSError:
                continue
            self._offsets[path] = self._offsets.get(path, 0) + len(data)
            *lines, rest = (self._partial.pop(path, b"") + data).split(b"\n")
            if final and rest:
                lines.append(rest)
            elif rest:
                self._partial[path] = rest
            for line in lines:
                self.stream.write(f"[rank {self.first_rank + local}] {line.decode(errors='replace')}\n")
        self.stream.flush()

    def collect(self) -> dict[int, RankOutput]:
        texts: dict[int, dict[str, str]] = {}
        truncated: set[int] = set()
        for (local, kind), path in self._files().items():
            rank = self.first_rank + local
            try:
                with open(path, "rb") as f:
                    size = f.seek(0, 2)
                    f.seek(max(0, size - CAP))
                    data = f.read()
            except OSError:
                continue
            if size > CAP:
                truncated.add(rank)
            texts.setdefault(rank, {})[kind] = data.decode(errors="replace")
        return {rank: RankOutput(rank, t.get("stdout", ""), t.get("stderr", ""), rank in truncated) for rank, t in texts.items()}
