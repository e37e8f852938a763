"""net.interconnect and the network interfaces NCCL is told to use.

Between nodes NCCL moves gradients over InfiniBand or RoCE when a port is ACTIVE, and over TCP
sockets otherwise (ten times slower or worse). Ports, their state and rate are read from sysfs
as `ibstat` does; interfaces from sysfs and /proc as `ip addr` shows them. No library needed.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from ddplint.runtime.checks.common import Findings, truthy
from ddplint.runtime.registry import ENV_LAUNCH, NET_INTERCONNECT
from ddplint.runtime.verdict import CheckResult, Status

SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class IbPort:
    device: str  # mlx5_0, efa_0, ...
    port: int
    state: str  # ACTIVE, DOWN, INIT, ARMED
    rate_gbps: float | None  # signalling rate, Gb/s
    link_layer: str  # InfiniBand or Ethernet (RoCE)

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    def describe(self) -> str:
        rate = f"{self.rate_gbps:g} Gb/s" if self.rate_gbps is not None else "rate ?"
        layer = "RoCE" if self.link_layer == "Ethernet" else self.link_layer
        return f"{self.name} {self.state} {rate} {layer}"


@dataclass(frozen=True)
class Interface:
    name: str
    up: bool  # operstate up (or unknown, which loopback and some tunnels report)
    addresses: tuple[str, ...]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def ib_ports(sysfs: str = "/sys") -> list[IbPort]:
    """Every port of every InfiniBand/RoCE/EFA device (/sys/class/infiniband/*/ports/*)."""
    root = os.path.join(sysfs, "class", "infiniband")
    ports = []
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return []
    for device in devices:
        base = os.path.join(root, device, "ports")
        try:
            numbers = sorted(int(p) for p in os.listdir(base) if p.isdigit())
        except OSError:
            continue
        for number in numbers:
            where = os.path.join(base, str(number))
            state = (_read(os.path.join(where, "state")) or "?").split(":")[-1].strip()
            rate = (_read(os.path.join(where, "rate")) or "").split()
            try:
                gbps = float(rate[0]) if rate else None
            except ValueError:
                gbps = None
            ports.append(IbPort(device, number, state, gbps, _read(os.path.join(where, "link_layer")) or "InfiniBand"))
    return ports


def nccl_ib_hca_matches(spec: str, ports: list[IbPort]) -> list[IbPort]:
    """Ports NCCL_IB_HCA selects: device prefixes ("mlx5" takes mlx5_0, mlx5_1...), "=" for
    exact names, "^" to exclude, each optionally with ":port"."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    wanted = []
    for item in (i.strip() for i in spec.split(",")):
        if item:
            device, _, port = item.partition(":")
            wanted.append((device, int(port) if port.isdigit() else None))

    def hit(p: IbPort) -> bool:
        return any((p.device == d if exact else p.device.startswith(d)) and n in (None, p.port) for d, n in wanted)

    return [p for p in ports if hit(p) != exclude]


def interface(name: str, sysfs: str = "/sys", procfs: str = "/proc") -> Interface:
    state = _read(os.path.join(sysfs, "class", "net", name, "operstate"))
    addresses = [a for a in (_ipv4(name),) if a]
    for line in (_read(os.path.join(procfs, "net", "if_inet6")) or "").splitlines():
        fields = line.split()
        if len(fields) == 6 and fields[5] == name:
            addresses.append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    return Interface(name, state in ("up", "unknown"), tuple(addresses))


def _ipv4(name: str) -> str | None:
    """The interface's IPv4 address, as `ip addr` shows it (SIOCGIFADDR)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(packed[20:24])


def unusable(names: list[str], info: Callable[[str], Interface] = interface) -> list[str]:
    """Of the interfaces NCCL_SOCKET_IFNAME selects, a description of each one that is down or
    has no address; empty when at least one can carry NCCL's sockets."""
    seen = [info(n) for n in names]
    if any(i.up and i.addresses for i in seen):
        return []
    return [f"{i.name} is {'up' if i.up else 'down'}" + ("" if i.addresses else " with no address") for i in seen]


def interconnect_check(environ: dict[str, str], nnodes: int, sysfs: str = "/sys") -> CheckResult:
    ports = ib_ports(sysfs)
    evidence = [p.describe() for p in ports] or ["no device under /sys/class/infiniband"]
    data = {"ports": [{"name": p.name, "state": p.state, "rate_gbps": p.rate_gbps, "link_layer": p.link_layer} for p in ports]}
    if nnodes == 1:
        return CheckResult(
            NET_INTERCONNECT, Status.SKIP, "one node: NCCL does not use the network between nodes", evidence, data=data
        )
    if truthy(environ.get("NCCL_IB_DISABLE")):
        return CheckResult(
            NET_INTERCONNECT,
            Status.SKIP,
            f"NCCL_IB_DISABLE=1: NCCL uses TCP sockets between nodes (see {ENV_LAUNCH})",
            evidence,
            data=data,
        )
    if not ports:
        return CheckResult(
            NET_INTERCONNECT, Status.SKIP, "no InfiniBand/RoCE device: NCCL uses TCP sockets between nodes", evidence, data=data
        )
    found = Findings()
    spec = environ.get("NCCL_IB_HCA")
    selected = nccl_ib_hca_matches(spec, ports) if spec else ports
    if spec and not selected:
        found.add(
            Status.FAIL,
            f"NCCL_IB_HCA={spec} selects no port of this host (it has {', '.join(p.name for p in ports)})",
            f"set NCCL_IB_HCA to some of {', '.join(p.device for p in ports)}, or unset it",
        )
    active = [p for p in selected if p.active]
    if selected and not active:
        found.add(
            Status.WARN,
            f"no {'selected ' if spec else ''}InfiniBand/RoCE port is ACTIVE "
            f"({', '.join(p.name + ' ' + p.state for p in selected)}): NCCL "
            "falls back to TCP sockets between nodes",
            "check the cable and the subnet manager (ibstat; sminfo), or select the active ports with NCCL_IB_HCA",
        )
    elif len(active) < len(selected):
        down = [p for p in selected if not p.active]
        found.add(
            Status.WARN,
            f"{', '.join(p.name + ' ' + p.state for p in down)} not ACTIVE: the ranks near them share fewer links",
            "check those ports (ibstat), or leave them out with NCCL_IB_HCA",
        )
    if found.items:
        return CheckResult(NET_INTERCONNECT, found.status, found.summary, evidence, found.fix, data=data)
    total = sum(p.rate_gbps or 0 for p in active)
    return CheckResult(
        NET_INTERCONNECT,
        Status.PASS,
        f"{len(active)} InfiniBand/RoCE port{'s' if len(active) > 1 else ''} ACTIVE, {total:g} Gb/s together",
        evidence,
        data=data,
    )


def active_rates(sysfs: str = "/sys", environ: dict[str, str] | None = None) -> list[float]:
    """Gb/s of each ACTIVE port NCCL may use here (after NCCL_IB_HCA), fastest first."""
    environ = dict(os.environ) if environ is None else environ
    if truthy(environ.get("NCCL_IB_DISABLE")):
        return []
    ports = ib_ports(sysfs)
    spec = environ.get("NCCL_IB_HCA")
    chosen = nccl_ib_hca_matches(spec, ports) if spec else ports
    return sorted((p.rate_gbps for p in chosen if p.active and p.rate_gbps), reverse=True)
