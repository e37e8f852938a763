"""env.port: the rendezvous port must be free on the node that hosts the store.

A stale listener on a c10d rendezvous port makes torchrun hang for over a minute before it
fails, so the port is probed before the launch and the holder is named.
"""

from __future__ import annotations

import errno
import socket

from ddplint.runtime.checks import procs
from ddplint.runtime.registry import ENV_PORT
from ddplint.runtime.verdict import CheckResult, Status


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def bind_error(port: int) -> int | None:
    """errno of binding the port on every address (as the store does), None when it is free.

    SO_REUSEADDR lets the probe ignore sockets in TIME_WAIT, which do not stop a new store,
    while a listening socket still refuses the bind.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            return e.errno
    return None


def holders(port: int) -> list[procs.Proc]:
    found = (procs.process(pid) for pid in procs.socket_owners(procs.listening_inodes(port)))
    return [p for p in found if p is not None]


def port_check(master_addr: str, port: int, node_rank: int = 0, record_port: int | None = None) -> CheckResult:
    """The store's port on node 0 and, in a multi-node audit, the port where node 0 collects
    the other nodes' records."""
    data = {"master_addr": master_addr, "master_port": port}
    try:
        socket.getaddrinfo(master_addr, port)
    except socket.gaierror as e:
        return CheckResult(
            ENV_PORT,
            Status.FAIL,
            f"MASTER_ADDR {master_addr} does not resolve ({e.strerror})",
            fix="pass --master-addr an IP address or a host name every node can resolve",
            data=data,
        )
    if node_rank != 0:
        return CheckResult(
            ENV_PORT, Status.SKIP, f"node {node_rank} joins the store that node 0 hosts on {master_addr}:{port}", data=data
        )
    for p, what in ((port, "the rendezvous store"), (record_port, "the other nodes' records")):
        if p is not None and (taken := _taken(p, what, data)) is not None:
            return taken
    if record_port is None:
        return CheckResult(ENV_PORT, Status.PASS, f"port {port} is free", data=data)
    data["record_port"] = record_port
    return CheckResult(
        ENV_PORT, Status.PASS, f"ports {port} (rendezvous) and {record_port} (records of the other nodes) are free", data=data
    )


def _taken(port: int, what: str, data: dict) -> CheckResult | None:
    err = bind_error(port)
    if err is None:
        return None
    if err == errno.EACCES:
        return CheckResult(
            ENV_PORT,
            Status.FAIL,
            f"port {port} for {what} needs root privileges",
            fix=f"use --master-port {free_port()}",
            data=data,
        )
    owners = holders(port)
    alternative = free_port()
    data.update(holders=[{"pid": p.pid, "command": p.command} for p in owners], free_port=alternative)
    if owners:
        who = ", ".join(f"pid {p.pid} ({p.short})" for p in owners)
        evidence = [f"pid {p.pid}, running {procs.age_text(p.age_s)}: {p.command}" for p in owners]
        kill = " ".join(str(p.pid) for p in owners)
        fix = f"stop it (kill {kill}) or use --master-port {alternative}"
    else:
        who = "a process this user cannot inspect"
        evidence = [f"no process of this user listens on {port}"]
        fix = f"use --master-port {alternative}"
    return CheckResult(ENV_PORT, Status.FAIL, f"port {port} ({what}) is already taken by {who}", evidence, fix, data=data)
