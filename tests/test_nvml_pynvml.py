"""PynvmlReads against the real pynvml module (nvidia-ml-py), with only its C library faked.

`FakeNvmlLib` stands in for libnvidia-ml.so: pynvml looks every C entry point up on
`pynvml.nvmlLib` by symbol name, so its own wrappers, structures, return-code checks and
exception classes all run. The fake answers from a recorded inventory (fixtures/nvml/) the way
the driver does: values through the pointers pynvml passes, NVML_ERROR_NOT_SUPPORTED where the
inventory holds null, NVML_ERROR_NO_PERMISSION for devices the process may not open, and no
symbol at all for functions an older driver lacks.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")

from conftest import wait_for_readings

from ddplint.runtime.checks.gpu import inventory_check, visible_gpus
from ddplint.runtime.checks.host import run_host_checks
from ddplint.runtime.checks.topology import topology_check
from ddplint.runtime.nvml import (
    NvmlReadFailed,
    PynvmlReads,
    load_machine,
    open_nvml,
    record,
    sysfs_numa_node,
)
from ddplint.runtime.options import RuntimeOptions
from ddplint.runtime.verdict import Status

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvml"
SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED, NO_PERMISSION, INSUFFICIENT_SIZE = 0, 2, 3, 4, 7
GPU_IS_LOST = 15
NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong
R470_MISSING = {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"}


def inventory(name: str) -> dict:
    inv = json.loads((FIXTURES / f"{name}.json").read_text())
    return {k: v for k, v in inv.items() if not k.startswith("_")}


def _out(ref):
    """The object behind a byref() argument."""
    return ref._obj


class FakeNvmlLib:
    """libnvidia-ml.so for one recorded machine. Handles are pointers whose value encodes the
    position in the inventory (+1); MIG handles encode 1000 * (position + 1) + instance."""

    def __init__(
        self,
        inv: dict,
        missing: set[str] = frozenset(),
        numa: dict[int, int] | None = None,
        memory_denied: set[int] = frozenset(),
        lost: set[int] = frozenset(),
    ):
        self.inv = inv
        self.missing = set(missing)
        self.numa = numa or {}  # NVML index -> nvmlDeviceGetNumaNodeId answer (else NOT_SUPPORTED)
        self.memory_denied = memory_denied  # NVML indices whose memory needs privileges
        self.lost = lost  # NVML indices that fell off the bus
        devices = inv["devices"]
        self.by_index = {d["index"]: pos for pos, d in enumerate(devices)}
        self.count = len(devices) + len(inv["unopened"])
        self.calls: list[str] = []

    def __getattr__(self, name):
        if name.startswith("nvml") and name not in self.missing:
            fn = getattr(type(self), "_" + name, None)
            if fn is not None:
                self.calls.append(name)
                return fn.__get__(self)
        raise AttributeError(name)  # pynvml turns this into NVMLError_FunctionNotFound

    # -- helpers --

    def _dev(self, handle):
        value = ctypes.cast(handle, ctypes.c_void_p).value
        return self.inv["devices"][value - 1]

    def _set(self, ref, value):
        _out(ref).value = value
        return SUCCESS

    def _opt(self, ref, value):
        return NOT_SUPPORTED if value is None else self._set(ref, value)

    # -- system --

    def _nvmlInitWithFlags(self, flags):
        return SUCCESS

    def _nvmlShutdown(self):
        return SUCCESS

    def _nvmlSystemGetDriverVersion(self, buf, size):
        buf.value = self.inv["driver_version"].encode()
        return SUCCESS

    def _nvmlSystemGetCudaDriverVersion(self, ref):
        return self._set(ref, self.inv["cuda_driver_version"])

    def _nvmlSystemGetProcessName(self, pid, buf, size):
        name = self.inv["process_names"].get(str(pid.value))
        if name is None:
            return NO_PERMISSION
        buf.value = name.encode()
        return SUCCESS

    # -- devices --

    def _nvmlDeviceGetCount_v2(self, ref):
        return self._set(ref, self.count)

    def _nvmlDeviceGetHandleByIndex_v2(self, index, ref):
        pos = self.by_index.get(index.value)
        if pos is None:
            return NO_PERMISSION
        ctypes.memmove(ctypes.addressof(_out(ref)), ctypes.byref(ctypes.c_void_p(pos + 1)), ctypes.sizeof(ctypes.c_void_p))
        return SUCCESS

    def _nvmlDeviceGetName(self, handle, buf, size):
        buf.value = self._dev(handle)["name"].encode()
        return SUCCESS

    def _nvmlDeviceGetUUID(self, handle, buf, size):
        value = ctypes.cast(handle, ctypes.c_void_p).value
        if value >= 1000:  # a MIG instance
            buf.value = self.inv["devices"][value // 1000 - 1]["mig_devices"][value % 1000].encode()
        else:
            buf.value = self._dev(handle)["uuid"].encode()
        return SUCCESS

    def _nvmlDeviceGetPciInfo_v3(self, handle, ref):
        _out(ref).busId = self._dev(handle)["pci_bus_id"].encode()
        return SUCCESS

    def _nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        cc = self._dev(handle)["compute_capability"]
        if cc is None:
            return NOT_SUPPORTED
        self._set(major, cc[0])
        return self._set(minor, cc[1])

    def _nvmlDeviceGetMemoryInfo(self, handle, ref):
        dev = self._dev(handle)
        if dev["index"] in self.lost:
            return GPU_IS_LOST
        if dev["index"] in self.memory_denied:
            return NO_PERMISSION
        if dev["memory"] is None:  # unified memory (DGX Spark's GB10)
            return NOT_SUPPORTED
        for key in ("total", "free", "used"):
            setattr(_out(ref), key, dev["memory"][key])
        return SUCCESS

    def _nvmlDeviceGetUtilizationRates(self, handle, ref):
        """One reading of the device's "utilization" list per call, the last one repeated; a
        device without one (as every recorded inventory: it is not part of it) answers NOT_SUPPORTED."""
        dev = self._dev(handle)
        readings = dev.get("utilization")
        if not readings:
            return NOT_SUPPORTED
        reading = readings.pop(0) if len(readings) > 1 else readings[0]
        _out(ref).gpu, _out(ref).memory = reading["gpu"], reading["memory"]
        return SUCCESS

    def _nvmlDeviceGetPersistenceMode(self, handle, ref):
        return self._opt(ref, self._dev(handle)["persistence_mode"])

    def _nvmlDeviceGetMigMode(self, handle, current, pending):
        mode = self._dev(handle)["mig_mode"]
        if mode is None:
            return NOT_SUPPORTED
        self._set(current, mode[0])
        return self._set(pending, mode[1])

    def _nvmlDeviceGetMaxMigDeviceCount(self, handle, ref):
        return self._set(ref, 7)

    def _nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index, ref):
        pos = ctypes.cast(handle, ctypes.c_void_p).value - 1
        if index.value >= len(self.inv["devices"][pos]["mig_devices"]):
            return 6  # NVML_ERROR_NOT_FOUND: no instance in this slot
        value = 1000 * (pos + 1) + index.value
        ctypes.memmove(ctypes.addressof(_out(ref)), ctypes.byref(ctypes.c_void_p(value)), ctypes.sizeof(ctypes.c_void_p))
        return SUCCESS

    def _nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type, ref):
        ecc = self._dev(handle)["ecc_uncorrected"]
        if ecc is None:
            return NOT_SUPPORTED
        return self._set(ref, ecc["volatile" if counter_type.value == 0 else "aggregate"])

    def _processes(self, key, handle, count_ref, array):
        procs = self._dev(handle)[key]
        if array is None:
            _out(count_ref).value = len(procs)
            return INSUFFICIENT_SIZE if procs else SUCCESS
        for k, p in enumerate(procs):
            array[k].pid = p["pid"]
            array[k].usedGpuMemory = NOT_AVAILABLE if p["used_gpu_memory"] is None else p["used_gpu_memory"]
        _out(count_ref).value = len(procs)
        return SUCCESS

    def _nvmlDeviceGetComputeRunningProcesses_v3(self, h, n, a):
        return self._processes("compute_processes", h, n, a)

    def _nvmlDeviceGetComputeRunningProcesses_v2(self, h, n, a):
        return self._processes("compute_processes", h, n, a)

    def _nvmlDeviceGetComputeRunningProcesses(self, h, n, a):  # v1: {pid, usedGpuMemory}
        assert a is None or [f[0] for f in a._type_._fields_] == ["pid", "usedGpuMemory"]
        return self._processes("compute_processes", h, n, a)

    def _nvmlDeviceGetGraphicsRunningProcesses_v3(self, h, n, a):
        return self._processes("graphics_processes", h, n, a)

    def _nvmlDeviceGetGraphicsRunningProcesses_v2(self, h, n, a):
        return self._processes("graphics_processes", h, n, a)

    def _nvmlDeviceGetGraphicsRunningProcesses(self, h, n, a):
        return self._processes("graphics_processes", h, n, a)

    def _pcie(self, handle, ref, key):
        pcie = self._dev(handle)["pcie"]
        return NOT_SUPPORTED if pcie is None else self._set(ref, pcie[key])

    def _nvmlDeviceGetMaxPcieLinkGeneration(self, h, ref):
        return self._pcie(h, ref, "max_gen")

    def _nvmlDeviceGetMaxPcieLinkWidth(self, h, ref):
        return self._pcie(h, ref, "max_width")

    def _nvmlDeviceGetCurrPcieLinkGeneration(self, h, ref):
        return self._pcie(h, ref, "cur_gen")

    def _nvmlDeviceGetCurrPcieLinkWidth(self, h, ref):
        return self._pcie(h, ref, "cur_width")

    def _nvmlDeviceGetNumaNodeId(self, handle, ref):
        return self._opt(ref, self.numa.get(self._dev(handle)["index"]))

    def _nvmlDeviceGetCpuAffinity(self, handle, size, ref):
        words = self._dev(handle)["cpu_affinity"]
        if words is None:
            return NOT_SUPPORTED
        for k in range(size):
            _out(ref)[k] = words[k] if k < len(words) else 0
        return SUCCESS

    def _link(self, handle, link):
        links = self._dev(handle)["nvlinks"]
        return links[link] if link < len(links) else None

    def _nvmlDeviceGetNvLinkState(self, handle, link, ref):
        entry = self._link(handle, link)
        return INVALID_ARGUMENT if entry is None else self._set(ref, entry["state"])

    def _nvmlDeviceGetNvLinkVersion(self, handle, link, ref):
        return self._opt(ref, self._link(handle, link)["version"])

    def _nvmlDeviceGetNvLinkRemoteDeviceType(self, handle, link, ref):
        return self._opt(ref, self._link(handle, link)["remote_type"])

    def _nvmlDeviceGetNvLinkRemotePciInfo_v2(self, handle, link, ref):
        bus = self._link(handle, link)["remote_bus_id"]
        if bus is None:
            return NOT_SUPPORTED
        _out(ref).busId = bus.encode()
        return SUCCESS

    def _pos(self, handle):
        return ctypes.cast(handle, ctypes.c_void_p).value - 1

    def _nvmlDeviceGetTopologyCommonAncestor(self, h1, h2, ref):
        return self._opt(ref, self.inv["topology"][self._pos(h1)][self._pos(h2)])

    def _nvmlDeviceGetP2PStatus(self, h1, h2, index, ref):
        return self._opt(ref, self.inv["p2p_nvlink"][self._pos(h1)][self._pos(h2)])

    def _nvmlDeviceGetComputeMode(self, handle, ref):
        return self._opt(ref, self._dev(handle)["compute_mode"])

    def _nvmlDeviceGetRemappedRows(self, handle, corr, unc, pending, failure):
        rows = self._dev(handle)["remapped_rows"]
        if rows is None:
            return NOT_SUPPORTED
        for ref, key in ((corr, "correctable"), (unc, "uncorrectable"), (pending, "pending"), (failure, "failure")):
            self._set(ref, rows[key])
        return SUCCESS

    def _nvmlDeviceGetRetiredPagesPendingStatus(self, handle, ref):
        return self._opt(ref, self._dev(handle)["retired_pages_pending"])

    def _nvmlDeviceGetCurrentClocksEventReasons(self, handle, ref):
        return self._opt(ref, self._dev(handle)["clock_events"])

    def _nvmlDeviceGetCurrentClocksThrottleReasons(self, handle, ref):  # the older name
        return self._opt(ref, self._dev(handle)["clock_events"])

    def _nvmlDeviceGetGpuFabricInfo(self, handle, info):
        # the driver writes through a pointer; a structure passed by value crashed a real H200
        assert isinstance(info, type(ctypes.byref(ctypes.c_int()))), "pass the structure by reference"
        fabric = self._dev(handle)["fabric"]
        if fabric is None:
            return NOT_SUPPORTED
        _out(info).state, _out(info).status = fabric["state"], fabric["status"]
        return SUCCESS


@pytest.fixture
def fake_nvml(monkeypatch):
    return fake_installer(monkeypatch)


def fake_installer(monkeypatch):
    """Install a FakeNvmlLib as pynvml's C library; pynvml's state is restored afterwards."""

    def install(lib: FakeNvmlLib) -> FakeNvmlLib:
        # the affinity mask has as many words as the recorded host had CPUs / 64
        words = max(len(d["cpu_affinity"] or [None]) for d in lib.inv["devices"])
        monkeypatch.setattr(os, "cpu_count", lambda: 64 * words)
        monkeypatch.setattr(pynvml, "nvmlLib", lib)
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
        monkeypatch.setattr(pynvml, "_nvmlLib_refcount", 0)
        return lib

    return install


def sysfs_tree(tmp_path: Path, inv: dict) -> str:
    """A /sys with numa_node files for the inventory's GPUs (-1 where it records null)."""
    for d in inv["devices"]:
        domain, rest = d["pci_bus_id"].split(":", 1)
        path = tmp_path / "bus" / "pci" / "devices" / f"{int(domain, 16):04x}:{rest.lower()}"
        path.mkdir(parents=True)
        (path / "numa_node").write_text(f"{-1 if d['numa_node'] is None else d['numa_node']}\n")
    return str(tmp_path)


def reads_for(lib: FakeNvmlLib, sysfs: str) -> PynvmlReads:
    pynvml.nvmlInit()
    return PynvmlReads(pynvml, sysfs=sysfs)


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_every_recorded_machine_reads_back_through_the_real_pynvml(name, fake_nvml, tmp_path):
    inv = inventory(name)
    missing = R470_MISSING if inv["driver_version"].startswith("470.") else set()
    lib = fake_nvml(FakeNvmlLib(inv, missing=missing))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert record(reads) == inv
    reads.close()


def test_r470_without_the_v3_process_symbols_reads_processes_through_v2(fake_nvml, tmp_path):
    inv = inventory("v100_sxm2_4x_driver_470")
    inv["devices"][1]["compute_processes"] = [{"pid": 4242, "used_gpu_memory": 2**30}]
    inv["process_names"] = {"4242": "python"}
    lib = fake_nvml(FakeNvmlLib(inv, missing=R470_MISSING))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    # pynvml's unversioned wrapper is what fails on R470: not an NVMLError at all
    with pytest.raises(pynvml.NVMLLibraryMismatchError):
        pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(1))
    assert not issubclass(pynvml.NVMLLibraryMismatchError, pynvml.NVMLError)
    assert reads.compute_processes(1) == [{"pid": 4242, "used_gpu_memory": 2**30}]
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in lib.calls
    machine = load_machine(reads)
    assert len(machine.gpus) == 4  # every GPU counted, so --backend nccl is not refused
    r = inventory_check(machine, 4, {}, ("1.12.1+cu113", "11.3"), backend="nccl")
    assert "GPU1 is already in use: pid 4242 python 1024 MiB" in r.summary


def test_a_driver_before_r460_answers_through_the_v1_symbol(fake_nvml, tmp_path):
    inv = inventory("a100_sxm_4x_foreign_processes")
    lib = fake_nvml(
        FakeNvmlLib(
            inv, missing=R470_MISSING | {"nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2"}
        )
    )
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert [reads.compute_processes(i) for i in range(4)] == [d["compute_processes"] for d in inv["devices"]]
    assert "nvmlDeviceGetComputeRunningProcesses" in lib.calls


def test_no_process_symbol_at_all_is_not_available_rather_than_an_error(fake_nvml, tmp_path):
    inv = inventory("a100_sxm_4x_foreign_processes")
    gone = {f"nvmlDevice{k}RunningProcesses{v}" for k in ("GetCompute", "GetGraphics") for v in ("", "_v2", "_v3")}
    lib = fake_nvml(FakeNvmlLib(inv, missing=gone))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert reads.compute_processes(2) == [] and reads.graphics_processes(2) == []


def test_used_gpu_memory_not_available_is_none(fake_nvml, tmp_path):
    inv = inventory("a100_sxm_4x_foreign_processes")
    inv["devices"][0]["compute_processes"] = [{"pid": 777, "used_gpu_memory": None}]
    inv["process_names"]["777"] = None
    lib = fake_nvml(FakeNvmlLib(inv))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert reads.compute_processes(0) == [{"pid": 777, "used_gpu_memory": None}]
    r = inventory_check(load_machine(reads), 1, {"CUDA_VISIBLE_DEVICES": "0"}, ("2.3.1+cu121", "12.1"))
    assert r.status is Status.WARN
    assert "GPU0 is already in use: pid 777 ? ? MiB" in r.summary


def test_devices_the_cgroup_denies_are_skipped_and_cuda_indices_follow_the_rest(fake_nvml, tmp_path):
    full = inventory("h100_sxm_8x_nvswitch")
    inv = dict(full)
    # SLURM ConstrainDevices gave this job GPUs 2 and 5: NVML still counts all eight
    keep = [2, 5]
    inv["devices"] = [full["devices"][i] for i in keep]
    inv["unopened"] = [{"index": i, "error": "Insufficient Permissions"} for i in range(8) if i not in keep]
    inv["topology"] = [[full["topology"][i][j] for j in keep] for i in keep]
    inv["p2p_nvlink"] = [[full["p2p_nvlink"][i][j] for j in keep] for i in keep]
    lib = fake_nvml(FakeNvmlLib(inv))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert record(reads) == inv
    machine = load_machine(reads)
    assert [g.index for g in machine.gpus] == [2, 5]
    # CUDA numbers the two GPUs it can open 0 and 1; NVML's GPU5 is CUDA's device 1
    assert visible_gpus(machine, "1").indices == [1]
    assert visible_gpus(machine, "2").indices == []
    assert visible_gpus(machine, machine.gpus[1].uuid[:12]).indices == [1]
    r = inventory_check(machine, 2, {}, ("2.4.1+cu124", "12.4"))
    assert r.status is Status.PASS
    assert any(e.startswith("NVML counts 6 more GPUs that this process may not open") for e in r.evidence)
    assert any(e.startswith("GPU5 NVIDIA H100 80GB HBM3") for e in r.evidence)
    topo = topology_check(machine, [0, 1])
    assert topo.evidence[0].split() == ["GPU2", "GPU5", "CPU", "Affinity", "NUMA", "Affinity"]
    assert topo.data["matrix"] == [["X", "NV18"], ["NV18", "X"]]


def test_memory_of_a_mig_parent_without_privileges_is_unreadable_not_a_dead_gpu(fake_nvml, tmp_path):
    inv = inventory("a100_sxm_2x_mig")
    lib = fake_nvml(FakeNvmlLib(inv, memory_denied={0}))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert reads.memory(0) is None
    results = run_host_checks(
        RuntimeOptions(script=Path("t.py")),
        1,
        0,
        nvml=reads,
        environ={"CUDA_VISIBLE_DEVICES": inv["devices"][0]["mig_devices"][1]},
    )
    assert results[0].status is not Status.FAIL, results[0].summary  # read, not "fell off the bus"
    gpu = inventory_check(
        load_machine(reads), 1, {"CUDA_VISIBLE_DEVICES": inv["devices"][0]["mig_devices"][1]}, ("2.4.1+cu124", "12.4")
    )
    assert gpu.status is Status.PASS, gpu.summary
    assert gpu.summary == "1 x NVIDIA A100-SXM4-40GB free for 1 process"
    assert any("memory not reported by NVML (a MIG-enabled GPU without privileges" in e for e in gpu.evidence)
    assert any(e.startswith("CUDA_VISIBLE_DEVICES names MIG-c07e1d95") for e in gpu.evidence)


def test_a_gpu_that_fell_off_the_bus_still_fails_the_inventory(fake_nvml, tmp_path):
    inv = inventory("a100_sxm_4x_foreign_processes")
    fake_nvml(FakeNvmlLib(inv, lost={3}))
    from ddplint.runtime.checks import host

    results = host.run_host_checks(RuntimeOptions(script=Path("t.py")), 4, 0, environ={})
    assert results[0].status is Status.FAIL
    assert results[0].summary == "a GPU fell off the bus (NVML: GPU is lost)"
    assert "needs a reset" in results[0].fix


def test_numa_node_comes_from_sysfs_and_nvml_only_where_sysfs_has_none(fake_nvml, tmp_path):
    inv = inventory("rtx4090_2x_pcie_cross_socket")
    lib = fake_nvml(FakeNvmlLib(inv))  # x86: nvmlDeviceGetNumaNodeId is NOT_SUPPORTED
    with_sysfs = reads_for(lib, sysfs_tree(tmp_path / "sys", inv))
    assert [with_sysfs.numa_node(i) for i in range(2)] == [0, 1]
    without = PynvmlReads(pynvml, sysfs=str(tmp_path / "empty"))
    assert [without.numa_node(i) for i in range(2)] == [None, None]
    grace = fake_nvml(FakeNvmlLib(inv, numa={0: 1, 1: 9}))  # GPUs that are NUMA nodes themselves
    assert [reads_for(grace, str(tmp_path / "empty")).numa_node(i) for i in range(2)] == [1, 9]
    # the same-socket suggestion needs the NUMA column: it appears with sysfs
    assert topology_check(load_machine(with_sysfs), [0, 1]).status is Status.WARN
    assert "N/A" not in " ".join(topology_check(load_machine(with_sysfs), [0, 1]).evidence[:3])


def test_sysfs_names_use_a_four_digit_lower_case_domain(tmp_path):
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:b1:00.0"
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("1\n")
    assert sysfs_numa_node("00000000:B1:00.0", str(tmp_path)) == 1
    (dev / "numa_node").write_text("-1\n")
    assert sysfs_numa_node("00000000:B1:00.0", str(tmp_path)) is None
    assert sysfs_numa_node("00000000:18:00.0", str(tmp_path)) is None


def test_a_failing_device_count_is_a_read_failure_not_a_traceback(fake_nvml):
    class Broken(FakeNvmlLib):
        def _nvmlDeviceGetCount_v2(self, ref):
            return 999  # NVML_ERROR_UNKNOWN

    fake_nvml(Broken(inventory("rtx4090_2x_pcie_cross_socket")))
    with pytest.raises(NvmlReadFailed, match=r"^NVML read failed \(Unknown Error\)$"):
        open_nvml()


def test_recording_a_machine_writes_what_replays_it(fake_nvml, monkeypatch, capsys):
    from ddplint.runtime import nvml

    inv = inventory("a100_sxm_4x_foreign_processes")
    fake_nvml(FakeNvmlLib(inv))
    # the NUMA column of this machine, as its sysfs would give it
    monkeypatch.setattr(nvml, "sysfs_numa_node", lambda bus, sysfs="/sys": 0)
    assert nvml.main() == 0
    assert json.loads(capsys.readouterr().out) == inv


def test_gpu_use_is_sampled_through_the_real_pynvml_during_the_with_block(fake_nvml, monkeypatch):
    from ddplint.runtime import nvml
    from ddplint.runtime.gpuuse import sampled_gpus, use_between

    inv = inventory("rtx4090_2x_pcie_cross_socket")
    inv["devices"][0]["utilization"] = [{"gpu": 97, "memory": 40}]
    lib = fake_nvml(FakeNvmlLib(inv))
    monkeypatch.setattr(nvml, "sysfs_numa_node", lambda bus, sysfs="/sys": None)
    ticks = iter(range(10**6))
    with sampled_gpus(range(2), {}, interval=0.001, clock=lambda: float(next(ticks))) as sampling:
        wait_for_readings(sampling, 8)
    assert sampling.unavailable is None and sampling.stopped is None
    assert sampling.gpus == ["GPU0", "GPU1"]
    gpu0, gpu1 = use_between(sampling, 0, 10**6)
    assert (gpu0.busy_mean_pct, gpu0.memory_peak_bytes) == (97, 742391808)
    assert gpu1.busy_mean_pct is None and gpu1.readings == gpu0.readings  # NOT_SUPPORTED: no value, still read
    assert lib.calls.count("nvmlShutdown") == 1  # the sampler's own NVML session is closed
