"""The few NVML reads the GPU checks need, behind one small interface.

NVML has no official mock, and most machines that run the tests have no GPU. So the checks
never call pynvml themselves: they read a `Machine` snapshot taken through `NvmlReads`, which
has two implementations. `PynvmlReads` calls the real library (nvidia-ml-py); `ReplayReads`
answers from a recorded JSON inventory of a real machine (fixtures/nvml/). The recording
format is exactly what `record()` writes, so `python -m ddplint.runtime.nvml > machine.json`
on a GPU host produces a new fixture.

Values keep NVML's own units and encodings: memory in bytes, enums as their integer values,
`nvmlSystemGetCudaDriverVersion` as an int such as 12040, bus ids as "00000000:18:00.0".
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Protocol

# NVML enum values used by the checks (nvml.h); names kept so fixtures can be read by people.
TOPOLOGY_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NVLINK_DEVICE_TYPE_GPU = 0
NVLINK_DEVICE_TYPE_SWITCH = 2
# nvmlNvlinkVersion_t -> (marketing generation, GB/s per link and direction)
NVLINK_VERSIONS = {
    1: ("1.0", 20.0),  # P100
    2: ("2.0", 25.0),  # V100
    3: ("2.2", 25.0),
    4: ("3.0", 25.0),  # A100
    5: ("3.1", 25.0),
    6: ("4.0", 25.0),  # H100
    7: ("5.0", 50.0),  # B200: 18 links, 1.8 TB/s both directions
    8: ("6.0", 50.0),  # Rubin: up to 36 links (NVML_NVLINK_MAX_LINKS), 3.6 TB/s both directions
}
# The enum does not tell a GA102 card's narrower NVLink 3 (RTX 3090, A40, RTX A6000: 4 links of
# 14.06 GB/s) from A100's; the compute capability does (NCCL also rates SM86 links at 0.6x SM80).
NVLINK_GBPS_BY_CAPABILITY = {(8, 6): 14.0625}
# PCIe payload bandwidth per lane and direction, GB/s, after line encoding.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


def nvlink_rate(version: int | None, capability: list[int] | None) -> tuple[str, float] | None:
    """(generation, GB/s per link and direction) of a GPU's NVLinks, None when unknown."""
    known = NVLINK_VERSIONS.get(version) if version is not None else None
    if known is None:
        return None
    gbps = NVLINK_GBPS_BY_CAPABILITY.get((capability[0], capability[1])) if capability else None
    return (known[0], gbps) if gbps is not None else known


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why in one line."""


class NvmlReadFailed(Exception):
    """NVML is there but a read failed (e.g. a GPU fell off the bus)."""


class NvmlReads(Protocol):
    """One method per NVML read; None where NVML answers NOT_SUPPORTED.

    Devices are numbered 0..device_count()-1 over the GPUs this process may open, in NVML
    order; `nvml_index(i)` is the number nvidia-smi gives the same GPU, and `unopened()` lists
    the GPUs NVML counts but will not hand out (cgroup- or SLURM-constrained devices).
    """

    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...
    def device_count(self) -> int: ...
    def unopened(self) -> list[dict[str, Any]]: ...  # index, error
    def nvml_index(self, i: int) -> int: ...
    def name(self, i: int) -> str: ...
    def uuid(self, i: int) -> str: ...
    def pci_bus_id(self, i: int) -> str: ...
    def compute_capability(self, i: int) -> list[int] | None: ...  # [major, minor]
    def memory(self, i: int) -> dict[str, int] | None: ...  # total, free, used (bytes)
    def persistence_mode(self, i: int) -> int | None: ...  # NVML_FEATURE_DISABLED/ENABLED
    def mig_mode(self, i: int) -> list[int] | None: ...  # [current, pending]
    def mig_devices(self, i: int) -> list[str]: ...  # UUIDs of the MIG instances
    def ecc_uncorrected(self, i: int) -> dict[str, int] | None: ...  # volatile, aggregate
    def compute_processes(self, i: int) -> list[dict[str, Any]]: ...  # pid, used_gpu_memory
    def graphics_processes(self, i: int) -> list[dict[str, Any]]: ...
    def process_name(self, pid: int) -> str | None: ...
    def pcie(self, i: int) -> dict[str, int] | None: ...  # max_gen, max_width, cur_gen, cur_width
    def numa_node(self, i: int) -> int | None: ...
    def cpu_affinity(self, i: int) -> list[int] | None: ...  # 64-bit mask words, CPU 0 = bit 0
    def nvlinks(self, i: int) -> list[dict[str, Any]]: ...  # link, state, version, remote_*
    def topology_level(self, i: int, j: int) -> int | None: ...  # NVML_TOPOLOGY_*
    def p2p_nvlink(self, i: int, j: int) -> int | None: ...  # NVML_P2P_STATUS_* (0 = OK)


@dataclass
class Process:
    pid: int
    used_bytes: int | None  # None: NVML cannot tell (no permission, another container)
    name: str | None
    kind: str  # "compute" | "graphics"


@dataclass
class Gpu:
    index: int  # NVML's (and nvidia-smi's) index; its position in Machine.gpus is CUDA's
    name: str
    uuid: str
    pci_bus_id: str
    memory_total: int | None  # None: not readable (a MIG parent GPU without privileges)
    memory_free: int | None
    memory_used: int | None
    persistence_mode: int | None
    mig_current: int | None
    mig_pending: int | None
    ecc_volatile_uncorrected: int | None
    ecc_aggregate_uncorrected: int | None
    processes: list[Process]
    pcie: dict[str, int] | None
    numa_node: int | None
    cpus: list[int] | None
    nvlinks: list[dict[str, Any]]
    compute_capability: list[int] | None = None
    mig_devices: list[str] = field(default_factory=list)

    @property
    def active_links(self) -> list[dict[str, Any]]:
        return [link for link in self.nvlinks if link.get("state") == 1]

    @property
    def label(self) -> str:
        return f"GPU{self.index}"


@dataclass
class Machine:
    driver_version: str
    cuda_driver_version: int
    gpus: list[Gpu]  # the GPUs this process may open; CUDA numbers them in this order
    topology: list[list[int | None]] = field(default_factory=list)
    p2p_nvlink: list[list[int | None]] = field(default_factory=list)
    unopened: list[dict[str, Any]] = field(default_factory=list)  # index, error

    def link(self, i: int, j: int) -> str:
        """The `nvidia-smi topo -m` cell for GPUs i and j: X, NV#, PIX, PXB, PHB, NODE, SYS."""
        if i == j:
            return "X"
        count = nvlink_count(self, i, j)
        if count:
            return f"NV{count}"
        level = self.topology[i][j] if self.topology else None
        return TOPOLOGY_LEVELS.get(level, "?") if level is not None else "?"


def nvlink_count(machine: Machine, i: int, j: int) -> int:
    """Active NVLinks from GPU i to GPU j: direct links, or switch links when P2P over NVLink works."""
    a, b = machine.gpus[i], machine.gpus[j]
    direct = [l for l in a.active_links if l.get("remote_type") == NVLINK_DEVICE_TYPE_GPU
              and _same_bus(l.get("remote_bus_id"), b.pci_bus_id)]
    if direct:
        return len(direct)
    p2p_ok = machine.p2p_nvlink and machine.p2p_nvlink[i][j] == 0
    switch_a = [l for l in a.active_links if l.get("remote_type") == NVLINK_DEVICE_TYPE_SWITCH]
    switch_b = [l for l in b.active_links if l.get("remote_type") == NVLINK_DEVICE_TYPE_SWITCH]
    if p2p_ok and switch_a and switch_b:
        return min(len(switch_a), len(switch_b))
    return 0


def links_within(machine: Machine, i: int, job: list[int]) -> int:
    """GPU i's active NVLinks that carry the job's traffic: its direct links to the job's other
    GPUs, or all its switch links (through NVSwitch every link reaches every peer)."""
    if any(l.get("remote_type") == NVLINK_DEVICE_TYPE_SWITCH for l in machine.gpus[i].active_links):
        return len(machine.gpus[i].active_links)
    return sum(nvlink_count(machine, i, j) for j in job if j != i)


def _same_bus(a: str | None, b: str) -> bool:
    return a is not None and a.lower().lstrip("0") == b.lower().lstrip("0")


def cpu_list(mask_words: list[int] | None) -> str:
    """NVML's affinity mask words as a Linux cpu list, e.g. "0-55,112-167"."""
    if not mask_words:
        return "?"
    cpus = [w * 64 + b for w, word in enumerate(mask_words) for b in range(64) if word >> b & 1]
    return format_ranges(cpus)


def format_ranges(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5"."""
    parts: list[str] = []
    start = prev = None
    for c in cpus + [None]:
        if start is not None and (c is None or c != prev + 1):
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if c is not None and start is None:
            start = c
        prev = c
    return ",".join(parts)


def load_machine(reads: NvmlReads) -> Machine:
    """Take one snapshot through `reads`: every check looks at the same moment."""
    count = reads.device_count()
    gpus = []
    for i in range(count):
        mem = reads.memory(i)
        mig = reads.mig_mode(i)
        ecc = reads.ecc_uncorrected(i)
        procs = [
            Process(p["pid"], p.get("used_gpu_memory"), reads.process_name(p["pid"]), kind)
            for kind, plist in (("compute", reads.compute_processes(i)),
                                ("graphics", reads.graphics_processes(i)))
            for p in plist
        ]
        gpus.append(Gpu(
            index=reads.nvml_index(i), name=reads.name(i), uuid=reads.uuid(i),
            pci_bus_id=reads.pci_bus_id(i),
            memory_total=mem["total"] if mem else None, memory_free=mem["free"] if mem else None,
            memory_used=mem["used"] if mem else None,
            persistence_mode=reads.persistence_mode(i),
            mig_current=mig[0] if mig else None, mig_pending=mig[1] if mig else None,
            ecc_volatile_uncorrected=ecc["volatile"] if ecc else None,
            ecc_aggregate_uncorrected=ecc["aggregate"] if ecc else None,
            processes=procs, pcie=reads.pcie(i), numa_node=reads.numa_node(i),
            cpus=reads.cpu_affinity(i), nvlinks=reads.nvlinks(i),
            compute_capability=reads.compute_capability(i), mig_devices=reads.mig_devices(i),
        ))
    topology = [[reads.topology_level(i, j) if i != j else 0 for j in range(count)]
                for i in range(count)]
    p2p = [[reads.p2p_nvlink(i, j) if i != j else None for j in range(count)]
           for i in range(count)]
    return Machine(reads.driver_version(), reads.cuda_driver_version(), gpus, topology, p2p,
                   reads.unopened())


def record(reads: NvmlReads) -> dict[str, Any]:
    """The JSON inventory that `ReplayReads` answers from."""
    count = reads.device_count()
    devices = []
    names: dict[str, str | None] = {}
    for i in range(count):
        compute, graphics = reads.compute_processes(i), reads.graphics_processes(i)
        for p in compute + graphics:
            names[str(p["pid"])] = reads.process_name(p["pid"])
        devices.append({
            "index": reads.nvml_index(i), "name": reads.name(i), "uuid": reads.uuid(i),
            "pci_bus_id": reads.pci_bus_id(i), "compute_capability": reads.compute_capability(i),
            "memory": reads.memory(i), "persistence_mode": reads.persistence_mode(i),
            "mig_mode": reads.mig_mode(i), "mig_devices": reads.mig_devices(i),
            "ecc_uncorrected": reads.ecc_uncorrected(i),
            "compute_processes": compute, "graphics_processes": graphics,
            "pcie": reads.pcie(i), "numa_node": reads.numa_node(i),
            "cpu_affinity": reads.cpu_affinity(i), "nvlinks": reads.nvlinks(i),
        })
    return {
        "driver_version": reads.driver_version(),
        "cuda_driver_version": reads.cuda_driver_version(),
        "devices": devices,
        "unopened": reads.unopened(),
        "process_names": names,
        "topology": [[reads.topology_level(i, j) if i != j else 0 for j in range(count)]
                     for i in range(count)],
        "p2p_nvlink": [[reads.p2p_nvlink(i, j) if i != j else None for j in range(count)]
                       for i in range(count)],
    }


class ReplayReads:
    """Answers every read from a recorded inventory (keys starting with "_" are notes)."""

    def __init__(self, inventory: dict[str, Any]):
        self._inv = inventory
        self._dev = inventory["devices"]

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ReplayReads:
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f))

    def driver_version(self) -> str:
        return self._inv["driver_version"]

    def cuda_driver_version(self) -> int:
        return self._inv["cuda_driver_version"]

    def device_count(self) -> int:
        return len(self._dev)

    def unopened(self):
        return self._inv["unopened"]

    def nvml_index(self, i):
        return self._dev[i]["index"]

    def name(self, i):
        return self._dev[i]["name"]

    def uuid(self, i):
        return self._dev[i]["uuid"]

    def pci_bus_id(self, i):
        return self._dev[i]["pci_bus_id"]

    def compute_capability(self, i):
        return self._dev[i]["compute_capability"]

    def memory(self, i):
        return self._dev[i]["memory"]

    def persistence_mode(self, i):
        return self._dev[i]["persistence_mode"]

    def mig_mode(self, i):
        return self._dev[i]["mig_mode"]

    def mig_devices(self, i):
        return self._dev[i]["mig_devices"]

    def ecc_uncorrected(self, i):
        return self._dev[i]["ecc_uncorrected"]

    def compute_processes(self, i):
        return self._dev[i]["compute_processes"]

    def graphics_processes(self, i):
        return self._dev[i]["graphics_processes"]

    def process_name(self, pid):
        return self._inv["process_names"].get(str(pid))

    def pcie(self, i):
        return self._dev[i]["pcie"]

    def numa_node(self, i):
        return self._dev[i]["numa_node"]

    def cpu_affinity(self, i):
        return self._dev[i]["cpu_affinity"]

    def nvlinks(self, i):
        return self._dev[i]["nvlinks"]

    def topology_level(self, i, j):
        return self._inv["topology"][i][j]

    def p2p_nvlink(self, i, j):
        return self._inv["p2p_nvlink"][i][j]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t: what drivers before R460 fill (nvidia-ml-py dropped its wrapper)."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


class PynvmlReads:
    """The real NVML through nvidia-ml-py. Construct with `open_nvml()`."""

    def __init__(self, pynvml: Any, sysfs: str = "/sys"):
        self._n = pynvml
        self._sysfs = sysfs
        self.error = pynvml.NVMLError
        self._no_permission = pynvml.NVMLError_NoPermission
        self._missing = pynvml.NVMLError_FunctionNotFound
        # "not there on this GPU/driver" answers, which mean "no value" rather than a failure
        self._absent = tuple(
            getattr(pynvml, n) for n in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound",
                                         "NVMLError_InvalidArgument", "NVMLError_NoPermission",
                                         "NVMLError_NotFound") if hasattr(pynvml, n))
        self._handles: list[Any] = []
        self._indices: list[int] = []
        self._unopened: list[dict[str, Any]] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                self._handles.append(pynvml.nvmlDeviceGetHandleByIndex(index))
                self._indices.append(index)
            except self._no_permission as e:  # a device the cgroup keeps from this process
                self._unopened.append({"index": index, "error": str(e)})

    def _opt(self, fn, *args):
        try:
            return fn(*args)
        except self._absent:
            return None

    def close(self) -> None:
        self._n.nvmlShutdown()

    def driver_version(self):
        return _text(self._n.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self):
        return int(self._n.nvmlSystemGetCudaDriverVersion())

    def device_count(self):
        return len(self._handles)

    def unopened(self):
        return list(self._unopened)

    def nvml_index(self, i):
        return self._indices[i]

    def name(self, i):
        return _text(self._n.nvmlDeviceGetName(self._handles[i]))

    def uuid(self, i):
        return _text(self._n.nvmlDeviceGetUUID(self._handles[i]))

    def pci_bus_id(self, i):
        return _text(self._n.nvmlDeviceGetPciInfo(self._handles[i]).busId)

    def compute_capability(self, i):
        cc = self._opt(self._n.nvmlDeviceGetCudaComputeCapability, self._handles[i])
        return [int(cc[0]), int(cc[1])] if cc is not None else None

    def memory(self, i):
        try:
            m = self._n.nvmlDeviceGetMemoryInfo(self._handles[i])
        except self._no_permission:  # a MIG-enabled GPU answers only with privileges
            return None
        return {"total": int(m.total), "free": int(m.free), "used": int(m.used)}

    def persistence_mode(self, i):
        return self._opt(self._n.nvmlDeviceGetPersistenceMode, self._handles[i])

    def mig_mode(self, i):
        mode = self._opt(self._n.nvmlDeviceGetMigMode, self._handles[i])
        return list(mode) if mode is not None else None

    def mig_devices(self, i):
        mode = self.mig_mode(i)
        if not mode or mode[0] != 1:
            return []
        h, n = self._handles[i], self._n
        uuids = []
        for k in range(self._opt(n.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mig = self._opt(n.nvmlDeviceGetMigDeviceHandleByIndex, h, k)
            if mig is not None:
                uuids.append(_text(n.nvmlDeviceGetUUID(mig)))
        return uuids

    def ecc_uncorrected(self, i):
        get = self._n.nvmlDeviceGetTotalEccErrors
        vol = self._opt(get, self._handles[i], 1, 0)  # UNCORRECTED, VOLATILE_ECC
        if vol is None:
            return None
        return {"volatile": int(vol), "aggregate": int(self._opt(get, self._handles[i], 1, 1) or 0)}

    def _procs(self, kind: str, i: int) -> list[dict[str, Any]]:
        """nvmlDevice<kind>RunningProcesses_v3 (R510+), else _v2 (R460+), else the v1 symbol;
        none answering is "cannot tell", not an error."""
        h = self._handles[i]
        plist = None
        for version in ("_v3", "_v2"):
            try:
                plist = getattr(self._n, f"nvmlDeviceGet{kind}RunningProcesses{version}")(h)
                break
            except self._missing:
                continue
            except self._absent:
                break
        else:
            plist = self._procs_v1(f"nvmlDeviceGet{kind}RunningProcesses", h)
        return [{"pid": int(p.pid), "used_gpu_memory": _bytes_or_none(p.usedGpuMemory)}
                for p in plist or []]

    def _procs_v1(self, symbol: str, handle) -> list[Any] | None:
        try:
            fn = self._n._nvmlGetFunctionPointer(symbol)
        except self.error:
            return None
        count = ctypes.c_uint(0)
        ret = fn(handle, ctypes.byref(count), None)
        if ret != self._n.NVML_ERROR_INSUFFICIENT_SIZE:
            return [] if ret == self._n.NVML_SUCCESS else None
        count.value = count.value * 2 + 5
        procs = (_ProcessInfoV1 * count.value)()
        if fn(handle, ctypes.byref(count), procs) != self._n.NVML_SUCCESS:
            return None
        return list(procs[:count.value])

    def compute_processes(self, i):
        return self._procs("Compute", i)

    def graphics_processes(self, i):
        return self._procs("Graphics", i)

    def process_name(self, pid):
        name = self._opt(self._n.nvmlSystemGetProcessName, pid)
        return _text(name) if name is not None else None

    def pcie(self, i):
        h, n = self._handles[i], self._n
        values = [self._opt(fn, h) for fn in (
            n.nvmlDeviceGetMaxPcieLinkGeneration, n.nvmlDeviceGetMaxPcieLinkWidth,
            n.nvmlDeviceGetCurrPcieLinkGeneration, n.nvmlDeviceGetCurrPcieLinkWidth)]
        if values[0] is None:
            return None
        return dict(zip(("max_gen", "max_width", "cur_gen", "cur_width"), values))

    def numa_node(self, i):
        """The NUMA node of the GPU's PCI device, as `nvidia-smi topo -m` reads it from sysfs;
        NVML's own answer only where sysfs has none (nvmlDeviceGetNumaNodeId is NOT_SUPPORTED
        on x86 hosts, where GPUs are not NUMA nodes themselves)."""
        node = sysfs_numa_node(self.pci_bus_id(i), self._sysfs)
        if node is None:
            node = self._opt(self._n.nvmlDeviceGetNumaNodeId, self._handles[i])
        return None if node is None or node < 0 else int(node)

    def cpu_affinity(self, i):
        words = max(1, -(-(os.cpu_count() or 1) // 64))
        mask = self._opt(self._n.nvmlDeviceGetCpuAffinity, self._handles[i], words)
        return [int(w) for w in mask] if mask is not None else None

    def nvlinks(self, i):
        h, n = self._handles[i], self._n
        links = []
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            state = self._opt(n.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                break
            remote_type = self._opt(n.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
            entry = {"link": link, "state": int(state),
                     "version": self._opt(n.nvmlDeviceGetNvLinkVersion, h, link),
                     "remote_type": remote_type, "remote_bus_id": None}
            if state == 1 and remote_type != NVLINK_DEVICE_TYPE_SWITCH:
                remote = self._opt(n.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                entry["remote_bus_id"] = _text(remote.busId) if remote is not None else None
            links.append(entry)
        return links

    def topology_level(self, i, j):
        return self._opt(self._n.nvmlDeviceGetTopologyCommonAncestor,
                         self._handles[i], self._handles[j])

    def p2p_nvlink(self, i, j):
        return self._opt(self._n.nvmlDeviceGetP2PStatus, self._handles[i], self._handles[j],
                         getattr(self._n, "NVML_P2P_CAPS_INDEX_NVLINK", 2))


def _bytes_or_none(value) -> int | None:
    """NVML_VALUE_NOT_AVAILABLE (all ones) and None both mean "cannot tell"."""
    return None if value is None or value == 2**64 - 1 else int(value)


def sysfs_numa_node(bus_id: str, sysfs: str = "/sys") -> int | None:
    """/sys/bus/pci/devices/<domain:bus:device.function>/numa_node; None when absent or -1.

    NVML writes the domain with 8 hex digits ("00000000:18:00.0"), sysfs with at least 4 and
    in lower case ("0000:18:00.0").
    """
    try:
        domain, rest = bus_id.split(":", 1)
        name = f"{int(domain, 16):04x}:{rest.lower()}"
        with open(os.path.join(sysfs, "bus", "pci", "devices", name, "numa_node")) as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None


def open_nvml() -> PynvmlReads:
    """Initialise the real NVML, or raise NvmlUnavailable with the reason in one line."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("NVML not available (nvidia-ml-py is not installed)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        value = getattr(e, "value", None)
        if value in (getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12),
                     getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9)):
            raise NvmlUnavailable("NVML not available (no NVIDIA driver loaded)") from None
        raise NvmlUnavailable(f"NVML not available ({e})") from None
    try:
        return PynvmlReads(pynvml)
    except pynvml.NVMLError as e:
        pynvml.nvmlShutdown()
        raise NvmlReadFailed(f"NVML read failed ({e})") from None


def main() -> int:
    """Record this machine's inventory as a JSON fixture on stdout."""
    try:
        reads = open_nvml()
    except (NvmlUnavailable, NvmlReadFailed) as e:
        print(f"ddplint: {e}", file=sys.stderr)
        return 2
    try:
        inventory = record(reads)
    except reads.error as e:
        print(f"ddplint: NVML read failed ({e})", file=sys.stderr)
        return 2
    finally:
        reads.close()
    json.dump(inventory, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
