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
    """NVML is there but cannot be read: a GPU fell off the bus, or the driver is broken.
    `fix` says what to do, in one line."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
REBOOT_FIX = (
    "reboot the node, or reload the NVIDIA kernel modules (sudo rmmod nvidia_uvm "
    "nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia)"
)
GPU_LOST_FIX = (
    "drain the node: a GPU that fell off the bus needs a reset (sudo nvidia-smi -r -i N) "
    "or a reboot; nvidia-smi and `dmesg | grep Xid` (Xid 79) show which one"
)


def read_failed(error: Exception) -> NvmlReadFailed:
    """The NVMLError of a read that must not be skipped, as a failure in the user's terms."""
    code = getattr(error, "value", None)
    if code == NVML_ERROR_GPU_IS_LOST:
        return NvmlReadFailed(f"a GPU fell off the bus (NVML: {error})", GPU_LOST_FIX)
    if code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return NvmlReadFailed(
            f"the NVIDIA kernel module and the user-space driver differ (NVML: {error}): the "
            "driver was upgraded without a reboot, and CUDA fails on every GPU (error 803)",
            REBOOT_FIX,
        )
    return NvmlReadFailed(f"NVML read failed ({error})", "run nvidia-smi: the GPU it cannot read needs attention before a job")


def nvidia_gpus_on_pci(sysfs: str = "/sys") -> list[str]:
    """PCI addresses of NVIDIA display and 3D controllers, whatever driver is (not) bound."""
    found = []
    root = os.path.join(sysfs, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        try:
            with open(os.path.join(root, name, "vendor")) as v, open(os.path.join(root, name, "class")) as c:
                vendor, klass = v.read().strip(), c.read().strip()
        except OSError:
            continue
        if vendor == "0x10de" and klass[:6] in ("0x0300", "0x0302"):
            found.append(name)
    return found


class NvmlReads(Protocol):
    """One method per NVML read; None where NVML answers NOT_SUPPORTED.

    Devices are numbered 0..device_count()-1 over the GPUs this process may open, in NVML
    order; `nvml_index(i)` is the number nvidia-smi gives the same GPU, and `unopened()` lists
    the GPUs NVML counts but will not hand out (cgroup- or SLURM-constrained devices).
    `lacking` names the calls the installed pynvml has no wrapper for (an old package).
    """

    lacking: set[str]

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
    def compute_mode(self, i: int) -> int | None: ...  # NVML_COMPUTEMODE_*
    def remapped_rows(self, i: int) -> dict[str, int] | None: ...  # correctable, uncorrectable, pending, failure
    def retired_pages_pending(self, i: int) -> int | None: ...  # NVML_FEATURE_DISABLED/ENABLED
    def clock_events(self, i: int) -> int | None: ...  # nvmlClocksEventReason* bit mask
    def fabric(self, i: int) -> dict[str, int] | None: ...  # state, status (NVSwitch systems)
    def utilization(self, i: int) -> dict[str, int] | None: ...  # gpu, memory (% of the last sample period)


@dataclass
class Process:
    pid: int
    used_bytes: int | None  # None: NVML cannot tell (no permission, another container)
    name: str | None
    kind: str  # "compute" | "graphics"


@dataclass
class Health:
    """What NVML says about a GPU's fitness for a long job; None where it has no answer."""

    compute_mode: int | None = None  # NVML_COMPUTEMODE_*
    remapped_rows: dict[str, int] | None = None  # correctable, uncorrectable, pending, failure
    retired_pages_pending: int | None = None  # 1: pages wait for a reset to be retired
    clock_events: int | None = None  # why the clocks are below their maximum, a bit mask
    fabric: dict[str, int] | None = None  # NVSwitch fabric registration: state, status


@dataclass
class Gpu:
    index: int  # NVML's (and nvidia-smi's) index; its position in Machine.gpus is CUDA's
    name: str
    uuid: str
    pci_bus_id: str
    memory_total: int | None  # None: NVML has no answer (MIG parent without privileges, GB10)
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
    health: Health = field(default_factory=Health)

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
    lacking: list[str] = field(default_factory=list)  # NVML calls the installed pynvml lacks

    def link(self, i: int, j: int) -> str:
        """The `nvidia-smi topo -m` cell for GPUs i and j: X, NV#, PIX, PXB, PHB, NODE, SYS."""
        if i == j:
            return "X"
        count = nvlink_count(self, i, j)
        if count:
            return f"NV{count}"
        level = self.topology[i][j] if self.topology else None
        return TOPOLOGY_LEVELS.get(level, "?") if level is not None else "?"


def _to_switch(machine: Machine, link: dict[str, Any]) -> bool:
    """A link ends at an NVSwitch: the driver says so, or (drivers before R470 do not answer
    the remote type) its far end is no GPU of this host, as NCCL tells by the remote PCI device."""
    if link.get("remote_type") is not None:
        return link["remote_type"] == NVLINK_DEVICE_TYPE_SWITCH
    bus = link.get("remote_bus_id")
    return bus is not None and not any(_same_bus(bus, g.pci_bus_id) for g in machine.gpus)


def _to_gpu(link: dict[str, Any], gpu: Gpu) -> bool:
    return link.get("remote_type") in (NVLINK_DEVICE_TYPE_GPU, None) and _same_bus(link.get("remote_bus_id"), gpu.pci_bus_id)


def nvlink_count(machine: Machine, i: int, j: int) -> int:
    """Active NVLinks from GPU i to GPU j: direct links, or switch links when P2P over NVLink works."""
    a, b = machine.gpus[i], machine.gpus[j]
    direct = [link for link in a.active_links if _to_gpu(link, b)]
    if direct:
        return len(direct)
    p2p_ok = machine.p2p_nvlink and machine.p2p_nvlink[i][j] == 0
    switch_a = [link for link in a.active_links if _to_switch(machine, link)]
    switch_b = [link for link in b.active_links if _to_switch(machine, link)]
    if p2p_ok and switch_a and switch_b:
        return min(len(switch_a), len(switch_b))
    return 0


def links_within(machine: Machine, i: int, job: list[int]) -> int:
    """GPU i's active NVLinks that carry the job's traffic: its direct links to the job's other
    GPUs, or all its switch links (through NVSwitch every link reaches every peer)."""
    if any(_to_switch(machine, link) for link in machine.gpus[i].active_links):
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
    start: int | None = None
    prev: int | None = None
    for c in [*cpus, None]:
        if start is not None and (c is None or prev is None or c != prev + 1):
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
            for kind, plist in (("compute", reads.compute_processes(i)), ("graphics", reads.graphics_processes(i)))
            for p in plist
        ]
        gpus.append(
            Gpu(
                index=reads.nvml_index(i),
                name=reads.name(i),
                uuid=reads.uuid(i),
                pci_bus_id=reads.pci_bus_id(i),
                memory_total=mem["total"] if mem else None,
                memory_free=mem["free"] if mem else None,
                memory_used=mem["used"] if mem else None,
                persistence_mode=reads.persistence_mode(i),
                mig_current=mig[0] if mig else None,
                mig_pending=mig[1] if mig else None,
                ecc_volatile_uncorrected=ecc["volatile"] if ecc else None,
                ecc_aggregate_uncorrected=ecc["aggregate"] if ecc else None,
                processes=procs,
                pcie=reads.pcie(i),
                numa_node=reads.numa_node(i),
                cpus=reads.cpu_affinity(i),
                nvlinks=reads.nvlinks(i),
                compute_capability=reads.compute_capability(i),
                mig_devices=reads.mig_devices(i),
                health=Health(
                    reads.compute_mode(i),
                    reads.remapped_rows(i),
                    reads.retired_pages_pending(i),
                    reads.clock_events(i),
                    reads.fabric(i),
                ),
            )
        )
    topology = [[reads.topology_level(i, j) if i != j else 0 for j in range(count)] for i in range(count)]
    p2p = [[reads.p2p_nvlink(i, j) if i != j else None for j in range(count)] for i in range(count)]
    return Machine(
        reads.driver_version(), reads.cuda_driver_version(), gpus, topology, p2p, reads.unopened(), sorted(reads.lacking)
    )


def record(reads: NvmlReads) -> dict[str, Any]:
    """The JSON inventory that `ReplayReads` answers from."""
    count = reads.device_count()
    devices = []
    names: dict[str, str | None] = {}
    for i in range(count):
        compute, graphics = reads.compute_processes(i), reads.graphics_processes(i)
        for p in compute + graphics:
            names[str(p["pid"])] = reads.process_name(p["pid"])
        devices.append(
            {
                "index": reads.nvml_index(i),
                "name": reads.name(i),
                "uuid": reads.uuid(i),
                "pci_bus_id": reads.pci_bus_id(i),
                "compute_capability": reads.compute_capability(i),
                "memory": reads.memory(i),
                "persistence_mode": reads.persistence_mode(i),
                "mig_mode": reads.mig_mode(i),
                "mig_devices": reads.mig_devices(i),
                "ecc_uncorrected": reads.ecc_uncorrected(i),
                "compute_processes": compute,
                "graphics_processes": graphics,
                "pcie": reads.pcie(i),
                "numa_node": reads.numa_node(i),
                "cpu_affinity": reads.cpu_affinity(i),
                "nvlinks": reads.nvlinks(i),
                "compute_mode": reads.compute_mode(i),
                "remapped_rows": reads.remapped_rows(i),
                "retired_pages_pending": reads.retired_pages_pending(i),
                "clock_events": reads.clock_events(i),
                "fabric": reads.fabric(i),
            }
        )
    return {
        "driver_version": reads.driver_version(),
        "cuda_driver_version": reads.cuda_driver_version(),
        "devices": devices,
        "unopened": reads.unopened(),
        "process_names": names,
        "topology": [[reads.topology_level(i, j) if i != j else 0 for j in range(count)] for i in range(count)],
        "p2p_nvlink": [[reads.p2p_nvlink(i, j) if i != j else None for j in range(count)] for i in range(count)],
    }


class ReplayReads:
    """Answers every read from a recorded inventory (keys starting with "_" are notes)."""

    def __init__(self, inventory: dict[str, Any]):
        self._inv = inventory
        self._dev = inventory["devices"]
        self.lacking: set[str] = set()
        self._served: dict[int, int] = {}  # utilization readings answered, per device

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

    def compute_mode(self, i):
        return self._dev[i]["compute_mode"]

    def remapped_rows(self, i):
        return self._dev[i]["remapped_rows"]

    def retired_pages_pending(self, i):
        return self._dev[i]["retired_pages_pending"]

    def clock_events(self, i):
        return self._dev[i]["clock_events"]

    def fabric(self, i):
        return self._dev[i]["fabric"]

    def utilization(self, i):
        """Not part of a recorded inventory (it changes by the moment): a test gives each device
        a "utilization" list, answered one reading per call, the last one repeated."""
        readings = self._dev[i].get("utilization")
        if not readings:
            return None
        served = self._served.get(i, 0)
        self._served[i] = served + 1
        return readings[min(served, len(readings) - 1)]


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
        # answers that mean "no value for this field" rather than a failed GPU: not there on
        # this GPU or driver, or one read that did not answer (DGX Spark's unified memory is
        # NOT_SUPPORTED; a busy GPU can time out one query)
        self._absent = tuple(
            getattr(pynvml, n)
            for n in (
                "NVMLError_NotSupported",
                "NVMLError_FunctionNotFound",
                "NVMLError_InvalidArgument",
                "NVMLError_NoPermission",
                "NVMLError_NotFound",
                "NVMLError_Unknown",
                "NVMLError_Timeout",
            )
            if hasattr(pynvml, n)
        )
        self._past_last_link = getattr(pynvml, "NVMLError_InvalidArgument", ())
        self.lacking: set[str] = set()  # wrappers this pynvml does not have
        self._handles: list[Any] = []
        self._indices: list[int] = []
        self._unopened: list[dict[str, Any]] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                self._handles.append(pynvml.nvmlDeviceGetHandleByIndex(index))
                self._indices.append(index)
            except self._no_permission as e:  # a device the cgroup keeps from this process
                self._unopened.append({"index": index, "error": str(e)})

    def _opt(self, name: str, *args):
        """pynvml.<name>(*args), None where the value is not there: NVML answers NOT_SUPPORTED
        (or UNKNOWN/TIMEOUT for this one field), or the pynvml installed is too old to have the
        wrapper (`lacking` names it). GPU_IS_LOST and other errors propagate."""
        fn = getattr(self._n, name, None)
        if fn is None:
            self.lacking.add(name)
            return None
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
        cc = self._opt("nvmlDeviceGetCudaComputeCapability", self._handles[i])
        return [int(cc[0]), int(cc[1])] if cc is not None else None

    def memory(self, i):
        """None where NVML has no answer: a MIG-enabled GPU without privileges (NO_PERMISSION),
        a unified-memory GPU such as DGX Spark's GB10 (NOT_SUPPORTED)."""
        m = self._opt("nvmlDeviceGetMemoryInfo", self._handles[i])
        if m is None:
            return None
        return {"total": int(m.total), "free": int(m.free), "used": int(m.used)}

    def persistence_mode(self, i):
        return self._opt("nvmlDeviceGetPersistenceMode", self._handles[i])

    def mig_mode(self, i):
        mode = self._opt("nvmlDeviceGetMigMode", self._handles[i])
        return list(mode) if mode is not None else None

    def mig_devices(self, i):
        mode = self.mig_mode(i)
        if not mode or mode[0] != 1:
            return []
        h, n = self._handles[i], self._n
        uuids = []
        for k in range(self._opt("nvmlDeviceGetMaxMigDeviceCount", h) or 0):
            mig = self._opt("nvmlDeviceGetMigDeviceHandleByIndex", h, k)
            if mig is not None:
                uuids.append(_text(n.nvmlDeviceGetUUID(mig)))
        return uuids

    def ecc_uncorrected(self, i):
        get = "nvmlDeviceGetTotalEccErrors"
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
            fn = getattr(self._n, f"nvmlDeviceGet{kind}RunningProcesses{version}", None)
            if fn is None:  # an old pynvml without this wrapper
                continue
            try:
                plist = fn(h)
                break
            except self._missing:
                continue
            except self._absent:
                break
        else:
            plist = self._procs_v1(f"nvmlDeviceGet{kind}RunningProcesses", h)
        return [{"pid": int(p.pid), "used_gpu_memory": _bytes_or_none(p.usedGpuMemory)} for p in plist or []]

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
        return list(procs[: count.value])

    def compute_processes(self, i):
        return self._procs("Compute", i)

    def graphics_processes(self, i):
        return self._procs("Graphics", i)

    def process_name(self, pid):
        name = self._opt("nvmlSystemGetProcessName", pid)
        return _text(name) if name is not None else None

    def pcie(self, i):
        h = self._handles[i]
        values = [
            self._opt(name, h)
            for name in (
                "nvmlDeviceGetMaxPcieLinkGeneration",
                "nvmlDeviceGetMaxPcieLinkWidth",
                "nvmlDeviceGetCurrPcieLinkGeneration",
                "nvmlDeviceGetCurrPcieLinkWidth",
            )
        ]
        if values[0] is None:
            return None
        return dict(zip(("max_gen", "max_width", "cur_gen", "cur_width"), values, strict=True))

    def numa_node(self, i):
        """The NUMA node of the GPU's PCI device, as `nvidia-smi topo -m` reads it from sysfs;
        NVML's own answer only where sysfs has none (nvmlDeviceGetNumaNodeId is NOT_SUPPORTED
        on x86 hosts, where GPUs are not NUMA nodes themselves)."""
        node = sysfs_numa_node(self.pci_bus_id(i), self._sysfs)
        if node is None:
            node = self._opt("nvmlDeviceGetNumaNodeId", self._handles[i])
        return None if node is None or node < 0 else int(node)

    def cpu_affinity(self, i):
        words = max(1, -(-(os.cpu_count() or 1) // 64))
        mask = self._opt("nvmlDeviceGetCpuAffinity", self._handles[i], words)
        return [int(w) for w in mask] if mask is not None else None

    def nvlinks(self, i):
        h, n = self._handles[i], self._n
        links = []
        for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                state = n.nvmlDeviceGetNvLinkState(h, link)
            except self._past_last_link:
                break
            except self._absent:  # this link has no state to read (a PCIe card answers so)
                continue
            remote_type = self._opt("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
            entry = {
                "link": link,
                "state": int(state),
                "version": self._opt("nvmlDeviceGetNvLinkVersion", h, link),
                "remote_type": remote_type,
                "remote_bus_id": None,
            }
            if state == 1 and remote_type != NVLINK_DEVICE_TYPE_SWITCH:
                remote = self._opt("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
                entry["remote_bus_id"] = _text(remote.busId) if remote is not None else None
            links.append(entry)
        return links

    def topology_level(self, i, j):
        return self._opt("nvmlDeviceGetTopologyCommonAncestor", self._handles[i], self._handles[j])

    def p2p_nvlink(self, i, j):
        return self._opt(
            "nvmlDeviceGetP2PStatus", self._handles[i], self._handles[j], getattr(self._n, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
        )

    def compute_mode(self, i):
        return self._opt("nvmlDeviceGetComputeMode", self._handles[i])

    def remapped_rows(self, i):
        rows = self._opt("nvmlDeviceGetRemappedRows", self._handles[i])  # Ampere and later
        if rows is None:
            return None
        return dict(zip(("correctable", "uncorrectable", "pending", "failure"), map(int, rows), strict=True))

    def retired_pages_pending(self, i):
        return self._opt("nvmlDeviceGetRetiredPagesPendingStatus", self._handles[i])

    def clock_events(self, i):
        """nvmlDeviceGetCurrentClocksEventReasons (R535+), else its older name ...ThrottleReasons."""
        names = [
            n
            for n in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
            if hasattr(self._n, n)
        ]
        if not names:
            self.lacking.add("nvmlDeviceGetCurrentClocksEventReasons")
        for name in names:
            reasons = self._opt(name, self._handles[i])
            if reasons is not None:
                return int(reasons)
        return None

    def fabric(self, i):
        """The GPU's registration with the NVSwitch fabric (Hopper and later). pynvml hands the
        structure to the C function as given, so it must be passed by reference: a structure
        passed by value crashes the process (seen on an H200, driver 580)."""
        info_type = getattr(self._n, "c_nvmlGpuFabricInfo_t", None)
        if info_type is None:
            self.lacking.add("nvmlDeviceGetGpuFabricInfo")
            return None
        info = info_type()
        if self._opt("nvmlDeviceGetGpuFabricInfo", self._handles[i], ctypes.byref(info)) is None:
            return None
        return {"state": int(info.state), "status": int(info.status)}

    def utilization(self, i):
        """nvmlDeviceGetUtilizationRates: in how much of the last sample period a kernel ran
        (gpu) and device memory was read or written (memory); None on a MIG instance's parent
        and wherever NVML has no answer."""
        u = self._opt("nvmlDeviceGetUtilizationRates", self._handles[i])
        return None if u is None else {"gpu": int(u.gpu), "memory": int(u.memory)}


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


def open_nvml(sysfs: str = "/sys", procfs: str = "/proc") -> PynvmlReads:
    """Initialise the real NVML; NvmlUnavailable where there is no NVIDIA driver to ask,
    NvmlReadFailed (with the fix) where GPUs are there but the driver cannot drive them."""
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("NVML not available (nvidia-ml-py is not installed)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        value = getattr(e, "value", None)
        if value == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
            raise read_failed(e) from None
        if value in (NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED):
            gpus = nvidia_gpus_on_pci(sysfs)
            loaded = os.path.isdir(os.path.join(procfs, "driver", "nvidia"))
            if value == NVML_ERROR_DRIVER_NOT_LOADED and gpus and not loaded:
                raise NvmlReadFailed(
                    f"NVIDIA GPUs are on the PCI bus ({', '.join(gpus[:4])}"
                    f"{', ...' if len(gpus) > 4 else ''}) but the NVIDIA driver is not loaded",
                    "load it (sudo modprobe nvidia) and read `dmesg | grep -i nvidia`; a kernel "
                    "updated without rebuilding the driver module (DKMS) is the usual cause",
                ) from None
            raise NvmlUnavailable("NVML not available (no NVIDIA driver loaded)") from None
        raise NvmlUnavailable(f"NVML not available ({e})") from None
    try:
        return PynvmlReads(pynvml)
    except pynvml.NVMLError as e:
        pynvml.nvmlShutdown()
        raise read_failed(e) from None


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
        print(f"ddplint: {read_failed(e)}", file=sys.stderr)
        return 2
    finally:
        reads.close()
    json.dump(inventory, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
