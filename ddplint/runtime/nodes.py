"""Multi-node audits: where each node stands, SLURM's view of that, and merging every node's
rank records so each node prints the report of all ranks.

Each node runs its own `ddplint --runtime` (by hand with --nnodes/--node-rank, or one srun
task per node). Node 0 listens on the rendezvous port + 1 from before its torchrun starts;
every other node, once its own torchrun has ended, sends its records there and receives the
union back. The launcher never imports torch, so this is a plain socket with length-prefixed
pickles, and the receiving side unpickles only plain data and numpy arrays.
"""

from __future__ import annotations

import io
import pickle
import re
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ddplint.runtime.options import RuntimeOptions

MERGE_WAIT_S = 60.0
C10D_DEFAULT_PORT = 29400
# what a record may hold besides plain containers: numpy index arrays (see dataprobe)
_ALLOWED = {
    ("numpy", "dtype"),
    ("numpy", "ndarray"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy", "int64"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
}


class LayoutError(ValueError):
    """The node layout cannot work (one line for the user)."""


@dataclass(frozen=True)
class Nodes:
    nnodes: int
    node_rank: int
    addr: str  # node 0's address
    port: int  # where node 0 collects records: the rendezvous port + 1

    @classmethod
    def of(cls, options: RuntimeOptions, master_port: int) -> Nodes:
        addr, port = rendezvous_address(options, master_port)
        return cls(options.nnodes, options.node_rank, addr, port + 1)


def rendezvous_address(options: RuntimeOptions, master_port: int) -> tuple[str, int]:
    """Where the store listens: the c10d endpoint when one is given, else the master's."""
    if options.rdzv_endpoint:
        host, _, tail = options.rdzv_endpoint.rpartition(":")
        if tail.isdigit():
            return host or options.master_addr, int(tail)
        return options.rdzv_endpoint, C10D_DEFAULT_PORT
    return options.master_addr, master_port


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: "gpu[07-09,12],login1" -> "gpu07"."""
    m = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist.strip())
    if not m:
        raise LayoutError(f"cannot read the SLURM node list {nodelist!r}")
    return m.group(1) + (m.group(2) or "")


def resolve_layout(options: RuntimeOptions, environ: dict[str, str]) -> RuntimeOptions:
    """Fill the node layout from SLURM when ddplint runs as an srun task, then check it.

    Under `srun --ntasks-per-node=1 ddplint --runtime ...` every task reads its node rank from
    SLURM_NODEID, node 0's address from the node list, and a port derived from the job id,
    so all nodes agree without flags. Flags given on the command line win.
    """
    slurm_nodes = int(environ.get("SLURM_NNODES") or environ.get("SLURM_JOB_NUM_NODES") or 1)
    in_srun = "SLURM_STEP_ID" in environ
    tasks = int(environ.get("SLURM_NTASKS") or slurm_nodes) if in_srun else 1
    if options.nnodes == 1 and in_srun and tasks > slurm_nodes:
        # each task would start its own torchrun with every rank: N audits fighting for the GPUs
        raise LayoutError(
            f"srun started {tasks} tasks on {slurm_nodes} node"
            f"{'s' if slurm_nodes > 1 else ''}; ddplint starts torchrun, which "
            "starts the ranks, so run one ddplint per node: srun --nodes "
            f"{slurm_nodes} --ntasks-per-node=1 ddplint --runtime ..."
        )
    if options.nnodes == 1 and slurm_nodes > 1 and in_srun:
        nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or ""
        changes: dict[str, Any] = {"nnodes": slurm_nodes, "node_rank": int(environ.get("SLURM_NODEID", "0"))}
        if options.master_addr == "127.0.0.1" and nodelist:
            changes["master_addr"] = first_host(nodelist)
        if options.master_port is None and options.rdzv_endpoint is None:
            changes["master_port"] = 20000 + int(environ.get("SLURM_JOB_ID", "0")) % 20000
        options = replace(options, **changes)
    if not 0 <= options.node_rank < options.nnodes:
        raise LayoutError(f"--node-rank {options.node_rank} is outside 0..{options.nnodes - 1}")
    if options.nnodes > 1 and options.master_port is None and options.rdzv_endpoint is None:
        raise LayoutError("--master-port is required with --nnodes > 1: every node must use the same port")
    return options


# ---- merging records ----------------------------------------------------------------------


class _RecordUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"unexpected {module}.{name} in a node's records")


def _send(sock: socket.socket, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(struct.pack("!Q", len(data)) + data)


def _recv(sock: socket.socket):
    head = _recv_exact(sock, 8)
    return _RecordUnpickler(io.BytesIO(_recv_exact(sock, struct.unpack("!Q", head)[0]))).load()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other node closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class RecordExchange:
    """Node 0 gathers every node's records and hands the union back to each of them."""

    def __init__(self, nodes: Nodes, progress: Callable[[str], None]):
        self.nodes = nodes
        self.progress = progress
        self.server: socket.socket | None = None

    def open(self) -> None:
        """On node 0, before torchrun starts: claim the port the other nodes will send to."""
        if self.nodes.node_rank != 0:
            return
        try:
            self.server = socket.create_server(("", self.nodes.port), backlog=self.nodes.nnodes)
        except OSError as exc:
            self.progress(
                f"cannot collect the other nodes' records on port {self.nodes.port}: "
                f"{exc.strerror}; this report covers node 0 only"
            )

    def merge(self, records: dict[int, dict], wait_s: float = MERGE_WAIT_S) -> dict[int, dict]:
        try:
            if self.nodes.node_rank == 0:
                return self._gather(records, wait_s)
            return self._send_and_receive(records, wait_s)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            self.progress(f"merging records across nodes failed ({exc}); this report covers this node only")
            return records
        finally:
            if self.server is not None:
                self.server.close()

    def _gather(self, records: dict[int, dict], wait_s: float) -> dict[int, dict]:
        if self.server is None:
            return records
        merged = dict(records)
        peers: list[socket.socket] = []
        deadline = time.monotonic() + wait_s
        try:
            while len(peers) < self.nodes.nnodes - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.progress(f"only {len(peers) + 1} of {self.nodes.nnodes} nodes sent their records within {wait_s:g} s")
                    break
                self.server.settimeout(left)
                try:
                    conn, _ = self.server.accept()
                except TimeoutError:
                    continue
                conn.settimeout(max(1.0, deadline - time.monotonic()))
                payload = _recv(conn)
                merged.update(payload["records"])
                peers.append(conn)
                self.progress(f"records of node {payload['node_rank']} received ({len(payload['records'])} ranks)")
            for conn in peers:
                _send(conn, merged)
        finally:
            for conn in peers:
                conn.close()
        return merged

    def _send_and_receive(self, records: dict[int, dict], wait_s: float) -> dict[int, dict]:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                sock = socket.create_connection((self.nodes.addr, self.nodes.port), timeout=5)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.2)
        with sock:
            sock.settimeout(max(1.0, deadline - time.monotonic()))
            _send(sock, {"node_rank": self.nodes.node_rank, "records": records})
            merged = _recv(sock)
        self.progress(f"merged the records of all {self.nodes.nnodes} nodes from node 0")
        return merged
