"""GPU machines as users have them, through nvidia-ml-py's own code with its C library faked
(FakeNvmlLib, see test_nvml_pynvml.py): unified memory (DGX Spark), a driver upgraded without a
reboot, a driver that did not load, an old pynvml, NVLink state on PCIe cards, GPU health
(row remapping, clocks, compute mode, NVSwitch fabric), and what a rank's CUDA/NCCL error means."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

pynvml = pytest.importorskip("pynvml")

from test_nvml_pynvml import (  # noqa: E402
    GPU_IS_LOST,
    INVALID_ARGUMENT,
    NOT_SUPPORTED,
    FakeNvmlLib,
    fake_installer,
    inventory,
    reads_for,
    sysfs_tree,
)

from ddplint.runtime import audit  # noqa: E402
from ddplint.runtime.checks.binding import distinct_check  # noqa: E402
from ddplint.runtime.checks.causes import cause_of  # noqa: E402
from ddplint.runtime.checks.comm import error_line, last_nccl_line  # noqa: E402
from ddplint.runtime.checks.gpu import inventory_check, nvml_module_check  # noqa: E402
from ddplint.runtime.checks.health import health_check  # noqa: E402
from ddplint.runtime.checks.host import run_host_checks  # noqa: E402
from ddplint.runtime.checks.stack import runs_on, versions_check  # noqa: E402
from ddplint.runtime.gpucount import (  # noqa: E402
    GpuCount,
    count_gpus,
    gpu_device_nodes,
    torch_gpu_count,
)
from ddplint.runtime.nvml import (  # noqa: E402
    NvmlReadFailed,
    NvmlUnavailable,
    ReplayReads,
    load_machine,
    nvlink_count,
    open_nvml,
    record,
)
from ddplint.runtime.options import RuntimeOptions  # noqa: E402
from ddplint.runtime.records import RankRecord
from ddplint.runtime.verdict import Status  # noqa: E402

TIMEOUT, UNKNOWN, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH = 10, 999, 9, 18
OPTIONS = RuntimeOptions(script=Path("t.py"))


@pytest.fixture
def fake_nvml(monkeypatch):
    return fake_installer(monkeypatch)


@pytest.fixture(autouse=True)
def cuda_torch(monkeypatch):
    """The host checks read the installed torch's CUDA version; here it is a CPU build."""
    monkeypatch.setattr("ddplint.runtime.checks.host.installed_torch_cuda", lambda: ("2.4.1+cu124", "12.4"))


def host(reads, nproc=1, environ=None):
    return {r.check: r for r in run_host_checks(OPTIONS, nproc, 0, nvml=reads, environ=environ or {})}


# -- one field without an answer is that field, not a dead GPU --------------------------------


def test_dgx_spark_unified_memory_reads_as_unknown_memory_and_the_gpu_counts(fake_nvml, tmp_path, monkeypatch):
    inv = inventory("gb10_dgx_spark_unified_memory")
    lib = fake_nvml(FakeNvmlLib(inv))
    reads = reads_for(lib, sysfs_tree(tmp_path, inv))
    assert reads.memory(0) is None  # NOT_SUPPORTED there: normal on unified memory
    checks = host(reads)
    assert checks["gpu.inventory"].status is Status.PASS, checks["gpu.inventory"].summary
    assert checks["gpu.inventory"].summary == "1 x NVIDIA GB10 free for 1 process"
    assert any("memory not reported by NVML" in e for e in checks["gpu.inventory"].evidence)
    assert checks["gpu.health"].status is Status.PASS
    # the audit counts the GPU, so --backend nccl is not refused and auto picks nccl
    monkeypatch.setattr("ddplint.runtime.nvml.sysfs_numa_node", lambda bus, sysfs="/sys": None)
    assert count_gpus({}) == GpuCount(1, "NVML")


@pytest.mark.parametrize("code", [NOT_SUPPORTED, UNKNOWN, TIMEOUT])
def test_a_field_that_does_not_answer_degrades_only_that_field(code, fake_nvml, tmp_path):
    class OneFieldFails(FakeNvmlLib):
        def _nvmlDeviceGetPersistenceMode(self, handle, ref):
            return code

        def _nvmlDeviceGetTotalEccErrors(self, handle, error_type, counter_type, ref):
            return code

    inv = inventory("a100_sxm_4x_foreign_processes")
    reads = reads_for(fake_nvml(OneFieldFails(inv)), sysfs_tree(tmp_path, inv))
    machine = load_machine(reads)
    assert [g.persistence_mode for g in machine.gpus] == [None] * 4
    assert [g.ecc_volatile_uncorrected for g in machine.gpus] == [None] * 4
    assert [g.memory_total for g in machine.gpus] == [d["memory"]["total"] for d in inv["devices"]]


def test_a_gpu_lost_in_any_read_is_still_a_failure(fake_nvml, tmp_path):
    class Lost(FakeNvmlLib):
        def _nvmlDeviceGetComputeMode(self, handle, ref):
            return GPU_IS_LOST

    inv = inventory("h100_sxm_8x_nvswitch")
    fake_nvml(Lost(inv))
    checks = {r.check: r for r in run_host_checks(OPTIONS, 8, 0, environ={})}
    assert checks["gpu.inventory"].status is Status.FAIL
    assert checks["gpu.inventory"].summary == "a GPU fell off the bus (NVML: GPU is lost)"
    assert checks["gpu.health"].status is Status.SKIP


def test_nvlink_reading_skips_links_without_state_and_stops_past_the_last(fake_nvml, tmp_path):
    inv = inventory("h100_sxm_8x_nvswitch")

    class Gaps(FakeNvmlLib):
        def _nvmlDeviceGetNvLinkState(self, handle, link, ref):
            if link == 2:
                return NOT_SUPPORTED  # a link with nothing to read: skipped, not the end
            return super()._nvmlDeviceGetNvLinkState(handle, link, ref)

    reads = reads_for(fake_nvml(Gaps(inv)), sysfs_tree(tmp_path, inv))
    links = reads.nvlinks(0)
    assert [link["link"] for link in links] == [k for k in range(18) if k != 2]
    # a PCIe card answers NOT_SUPPORTED for every link (the H200 recorded here): no links,
    # and never more questions than NVML has links
    h200 = inventory("h200_1x_vm_recorded")

    class Pcie(FakeNvmlLib):
        asked: list[int] = []

        def _nvmlDeviceGetNvLinkState(self, handle, link, ref):
            self.asked.append(link)
            return NOT_SUPPORTED

    lib = fake_nvml(Pcie(h200))
    reads = reads_for(lib, sysfs_tree(tmp_path / "h200", h200))
    assert reads.nvlinks(0) == []
    assert lib.asked == list(range(pynvml.NVML_NVLINK_MAX_LINKS))

    class Two(FakeNvmlLib):  # past the last link NVML answers INVALID_ARGUMENT: stop there
        asked: list[int] = []

        def _nvmlDeviceGetNvLinkState(self, handle, link, ref):
            self.asked.append(link)
            return INVALID_ARGUMENT if link >= 2 else super()._nvmlDeviceGetNvLinkState(handle, link, ref)

    lib = fake_nvml(Two(inv))
    reads = reads_for(lib, sysfs_tree(tmp_path / "two", inv))
    assert [link["link"] for link in reads.nvlinks(0)] == [0, 1]
    assert lib.asked == [0, 1, 2]


def test_links_of_a_driver_that_does_not_name_the_remote_type_are_told_by_the_remote_pci_device():
    inv = inventory("h100_sxm_8x_nvswitch")
    for dev in inv["devices"]:  # before R470: no remote type; the far end is an NVSwitch PCI device
        for link in dev["nvlinks"]:
            link["remote_type"] = None
            link["remote_bus_id"] = "00000000:C5:00.0"
    machine = load_machine(ReplayReads(inv))
    assert nvlink_count(machine, 0, 1) == 18
    assert machine.link(0, 7) == "NV18"


# -- a driver that cannot drive the GPUs is a failure, never a quiet CPU fallback --------------


def test_driver_library_mismatch_fails_with_reboot_and_refuses_nccl(fake_nvml, monkeypatch):
    class Mismatch(FakeNvmlLib):
        def _nvmlInitWithFlags(self, flags):
            return LIB_RM_VERSION_MISMATCH

    fake_nvml(Mismatch(inventory("a100_sxm_4x_foreign_processes")))
    with pytest.raises(NvmlReadFailed) as info:
        open_nvml()
    assert str(info.value).startswith(
        "the NVIDIA kernel module and the user-space driver differ "
        "(NVML: RM has detected an NVML/RM version mismatch.): the "
        "driver was upgraded without a reboot"
    )
    assert info.value.fix.startswith("reboot the node")
    checks = {r.check: r for r in run_host_checks(OPTIONS, 2, 0, environ={})}
    assert checks["gpu.inventory"].status is Status.FAIL
    assert checks["gpu.inventory"].fix.startswith("reboot the node")
    counted = count_gpus({})
    assert counted.count == 0 and "upgraded without a reboot" in counted.broken
    script = Path(__file__)
    with pytest.raises(audit.UsageError, match="--backend nccl needs GPUs and none can be used: the NVIDIA kernel module"):
        audit._validate(RuntimeOptions(script=script, backend="nccl"))


def _pci(tmp_path: Path, devices: dict[str, tuple[str, str]]) -> str:
    for name, (vendor, klass) in devices.items():
        d = tmp_path / "bus" / "pci" / "devices" / name
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
    return str(tmp_path)


def test_a_driver_that_did_not_load_on_a_host_with_nvidia_gpus_fails(fake_nvml, tmp_path):
    class NotLoaded(FakeNvmlLib):
        def _nvmlInitWithFlags(self, flags):
            return DRIVER_NOT_LOADED

    fake_nvml(NotLoaded(inventory("rtx4090_2x_pcie_cross_socket")))
    sysfs = _pci(
        tmp_path / "sys",
        {
            "0000:18:00.0": ("0x10de", "0x030000"),
            "0000:18:00.1": ("0x10de", "0x040300"),  # its audio function
            "0000:00:02.0": ("0x8086", "0x030000"),
        },
    )
    proc = tmp_path / "proc"
    proc.mkdir()
    with pytest.raises(
        NvmlReadFailed,
        match=r"^NVIDIA GPUs are on the PCI bus \(0000:18:00.0\) "
        r"but the NVIDIA driver is not loaded$",
    ) as info:
        open_nvml(sysfs=sysfs, procfs=str(proc))
    assert info.value.fix.startswith("load it (sudo modprobe nvidia)")
    # the kernel driver is there (a container of a GPU host without NVML): no GPU to blame
    (proc / "driver" / "nvidia").mkdir(parents=True)
    with pytest.raises(NvmlUnavailable):
        open_nvml(sysfs=sysfs, procfs=str(proc))
    # no NVIDIA GPU on the bus: a CPU machine, as before
    with pytest.raises(NvmlUnavailable, match=r"no NVIDIA driver loaded"):
        open_nvml(sysfs=_pci(tmp_path / "cpu", {"0000:00:02.0": ("0x8086", "0x030000")}), procfs=str(tmp_path / "empty"))


# -- an old pynvml degrades the calls it lacks --------------------------------------------------


def test_an_old_pynvml_without_some_wrappers_reads_the_rest_and_names_what_it_lacks(fake_nvml, tmp_path, monkeypatch):
    for name in (
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "c_nvmlGpuFabricInfo_t",
    ):
        monkeypatch.delattr(pynvml, name)
    inv = inventory("h100_sxm_8x_nvswitch")
    reads = reads_for(fake_nvml(FakeNvmlLib(inv)), sysfs_tree(tmp_path, inv))
    machine = load_machine(reads)
    assert len(machine.gpus) == 8 and machine.gpus[0].memory_total == inv["devices"][0]["memory"]["total"]
    assert machine.gpus[0].health.remapped_rows is None and machine.gpus[0].health.fabric is None
    assert machine.lacking == [
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetRemappedRows",
    ]
    stack = nvml_module_check(machine.lacking)
    assert stack.status is Status.WARN
    assert (
        "it lacks nvmlDeviceGetCurrentClocksEventReasons, nvmlDeviceGetGpuFabricInfo, "
        "nvmlDeviceGetRemappedRows, so those reads were left out" in stack.summary
    )
    assert host(reads, 8)["gpu.inventory"].status is Status.PASS


# -- health ------------------------------------------------------------------------------------


def machine_with(name: str, **health) -> object:
    inv = copy.deepcopy(inventory(name))
    for dev in inv["devices"]:
        dev.update(health)
    return load_machine(ReplayReads(inv))


def test_recorded_healthy_machines_pass_health():
    for name in ("h100_sxm_8x_nvswitch", "h200_1x_vm_recorded", "v100_sxm2_4x_driver_470", "rtx4090_2x_pcie_cross_socket"):
        m = load_machine(ReplayReads(inventory(name)))
        r = health_check(m, list(range(len(m.gpus))), len(m.gpus))
        assert r.status is Status.PASS, (name, r.summary)
    assert health_check(m, [], 2).status is Status.SKIP


def test_memory_repairs_fail_or_warn():
    failed = machine_with(
        "a100_sxm_4x_foreign_processes", remapped_rows={"correctable": 0, "uncorrectable": 3, "pending": 0, "failure": 1}
    )
    r = health_check(failed, [0, 1], 2)
    assert r.status is Status.FAIL
    assert r.summary.startswith("GPU0 failed to remap a memory row")
    assert r.fix.startswith("drain the node and replace GPU0")
    pending = machine_with(
        "a100_sxm_4x_foreign_processes", remapped_rows={"correctable": 1, "uncorrectable": 0, "pending": 1, "failure": 0}
    )
    assert health_check(pending, [0], 1).status is Status.WARN
    retired = machine_with("v100_sxm2_4x_driver_470", retired_pages_pending=1)
    r = health_check(retired, [3], 1)
    assert r.status is Status.WARN and "GPU3 has retired memory pages pending" in r.summary


def test_clock_slowdowns_warn_and_idle_or_power_cap_do_not():
    hot = machine_with("h100_sxm_8x_nvswitch", clock_events=0x40 | 0x1)
    r = health_check(hot, [0], 1)
    assert r.status is Status.WARN
    assert r.summary.startswith("GPU0 runs below its clocks now (hardware thermal slowdown)")
    brake = machine_with("h100_sxm_8x_nvswitch", clock_events=0x80 | 0x8)
    assert "hardware slowdown, hardware power brake" in health_check(brake, [0], 1).summary
    capped = machine_with("h100_sxm_8x_nvswitch", clock_events=0x4 | 0x1)  # SW power cap: normal
    assert health_check(capped, [0], 1).status is Status.PASS


def test_compute_modes():
    prohibited = machine_with("rtx4090_2x_pcie_cross_socket", compute_mode=2)
    r = health_check(prohibited, [0, 1], 2)
    assert r.status is Status.FAIL and r.fix == "sudo nvidia-smi -i 0 -c DEFAULT"
    exclusive = machine_with("rtx4090_2x_pcie_cross_socket", compute_mode=3)
    assert health_check(exclusive, [0, 1], 2).status is Status.PASS  # one rank per GPU: fine
    shared = health_check(exclusive, [0], 2)  # two ranks on one exclusive GPU
    assert shared.status is Status.FAIL and "Exclusive_Process" in shared.summary


def test_nvswitch_fabric_not_started_fails_with_fabric_manager_fix(fake_nvml, tmp_path):
    inv = inventory("h100_sxm_8x_nvswitch")
    inv["devices"][5]["fabric"] = {"state": 1, "status": 0}
    reads = reads_for(fake_nvml(FakeNvmlLib(inv)), sysfs_tree(tmp_path, inv))
    assert record(reads)["devices"][5]["fabric"] == {"state": 1, "status": 0}  # read by reference
    r = host(reads, 8)["gpu.health"]
    assert r.status is Status.FAIL
    assert r.summary.startswith("GPU5's NVLink fabric registration is not started")
    assert "nvidia-fabricmanager" in r.fix and "error 802" in r.fix
    failed = machine_with("h100_sxm_8x_nvswitch", fabric={"state": 3, "status": 999})
    assert "registration failed (NVML status 999)" in health_check(failed, [0], 1).summary


def test_persistence_off_warns_only_on_many_gpus():
    off = machine_with("h100_sxm_8x_nvswitch", persistence_mode=0)
    assert health_check(off, list(range(8)), 8).status is Status.WARN
    assert health_check(off, [0, 1], 2).status is Status.PASS


# -- mixed models and CUDA's numbering ---------------------------------------------------------


def test_mixed_models_without_pci_bus_order_warn_with_the_fix():
    m = load_machine(ReplayReads(inventory("a100_pcie_mixed_40gb_80gb")))
    r = inventory_check(m, 4, {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"}, ("2.4.1+cu124", "12.4"))
    assert r.status is Status.WARN
    assert "GPUs of different models and CUDA_DEVICE_ORDER is not PCI_BUS_ID" in r.summary
    same = load_machine(ReplayReads(inventory("h100_sxm_8x_nvswitch")))
    assert inventory_check(same, 8, {}, ("2.4.1+cu124", "12.4")).status is Status.PASS


# -- torch without kernels for the GPU ---------------------------------------------------------


ARCH_CU118 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
ARCH_CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.11 on the H200


def test_arch_list_coverage():
    assert runs_on(ARCH_CU130, [9, 0])  # the H200 this was recorded on
    assert runs_on(ARCH_CU118, [8, 9])  # sm_86 machine code runs on 8.9 (same major)
    assert not runs_on(ARCH_CU118, [12, 0])  # RTX 50xx on a CUDA 11.8 wheel
    assert not runs_on(ARCH_CU118, [10, 0])  # B200
    assert runs_on(ARCH_CU130, [12, 1])  # GB10: sm_120 code runs on 12.1
    assert runs_on(["sm_80", "compute_80"], [12, 0])  # PTX is compiled by the driver
    assert not runs_on(["sm_90a"], [10, 0])  # architecture-specific code runs only there


def _rank(arch_list, gpus, cuda="11.8"):
    versions = {
        "python": "3.11.7",
        "torch": f"2.3.1+cu{cuda.replace('.', '')}",
        "cuda": cuda,
        "cudnn": 8700,
        "nccl": "2.20.5",
        "nccl_available": True,
        "cuda_available": True,
        "device_count": len(gpus),
        "arch_list": arch_list,
        "packages": [],
        "packages_hash": "x",
        "script": "t.py",
        "script_sha256": None,
        "git_commit": None,
    }
    nvml = {
        "driver_version": "580.159.04",
        "cuda_driver_version": 13000,
        "visible": len(gpus),
        "uuids": [f"GPU-{k}" for k in range(len(gpus))],
        "gpus": gpus,
        "expected_busbw_gbps": None,
        "basis": None,
    }
    return RankRecord.from_plain(
        {
            "rank": 0,
            "status": "completed",
            "info": {"hostname": "n0", "env": {"RANK": "0", "LOCAL_RANK": "0"}, "versions": versions, "nvml": nvml},
        }
    )


def test_a_torch_without_kernels_for_the_gpu_fails_stack_versions():
    rtx5090 = [{"name": "NVIDIA GeForce RTX 5090", "capability": [12, 0]}] * 2
    r = versions_check([_rank(ARCH_CU118, rtx5090)])
    assert r.status is Status.FAIL
    assert "has no kernels for the NVIDIA GeForce RTX 5090 (compute capability 12.0, sm_120)" in r.summary
    assert "sm_120" in r.fix
    h200 = [{"name": "NVIDIA H200", "capability": [9, 0]}]
    assert versions_check([_rank(ARCH_CU130, h200, "13.0")]).status is Status.PASS


# -- what a rank's CUDA or NCCL error means ----------------------------------------------------

# recorded on the H200 (torch 2.11.0+cu130, NCCL 2.28.9): two ranks on one GPU
NCCL_2_28_DUPLICATE = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:93, invalid usage (run "
    "with NCCL_DEBUG=WARN for details), NCCL version 2.28.9\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Last error:\nDuplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"
)
# NCCL 2.30 and later: no rank, no bus
NCCL_2_31_MULTIPLE = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:94, invalid usage (run "
    "with NCCL_DEBUG=WARN for details), NCCL version 2.31.2\n"
    "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
    "Last error:\nMultiple Ranks are using the same GPU/Partition. Set "
    "NCCL_MULTI_RANK_GPU_ENABLE=1 to enable this configuration."
)


def _raised(rank, text):
    return RankRecord.from_plain(
        {
            "rank": rank,
            "status": "raised",
            "error": {"type": "DistBackendError", "message": text.splitlines()[0], "text": text, "t": rank},
            "info": {"hostname": "vm", "env": {"RANK": str(rank), "LOCAL_RANK": str(rank)}},
        }
    )


def test_nccl_refusals_of_both_generations_name_the_shared_gpu():
    old = distinct_check([_raised(0, NCCL_2_28_DUPLICATE), _raised(1, NCCL_2_28_DUPLICATE)])
    assert old.status is Status.FAIL
    assert old.summary == ("ranks 0-1 share the GPU at PCI 0000:00:06.0: NCCL refused them (Duplicate GPU detected)")
    new = distinct_check([_raised(0, NCCL_2_31_MULTIPLE), _raised(1, NCCL_2_31_MULTIPLE)])
    assert new.status is Status.FAIL
    assert new.summary == ("ranks 0-1 share a GPU: NCCL refused them (Multiple Ranks are using the same GPU/Partition)")
    assert new.fix.startswith("bind each rank before building the model")


def test_the_last_error_detail_is_kept_and_the_fix_follows_the_cause():
    assert error_line(RuntimeError(NCCL_2_31_MULTIPLE)).startswith("Multiple Ranks are using")
    assert error_line(RuntimeError(NCCL_2_28_DUPLICATE)) == "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"
    log = "\n".join(f"[rank0]: | {line}" for line in NCCL_2_28_DUPLICATE.splitlines())
    assert last_nccl_line(log.replace("[rank0]: ", "")) == "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"
    assert cause_of(NCCL_2_31_MULTIPLE).fix.startswith("bind each rank")


@pytest.mark.parametrize(
    "text, starts",
    [
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions "
            "before calling NumCudaDevices() that might have already set an error? Error 803: system "
            "has unsupported display driver / cuda driver combination",
            "reboot the node",
        ),
        (
            "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward "
            "compatibility was attempted on non supported HW",
            "take the cuda-compat directory out of LD_LIBRARY_PATH",
        ),
        ("RuntimeError: CUDA error: system not yet initialized", "start the NVIDIA Fabric Manager"),
        (
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
            "install a torch build whose CUDA version supports the GPU",
        ),
    ],
)
def test_cuda_errors_that_are_machine_problems_name_their_fix(text, starts):
    assert cause_of(text).fix.startswith(starts)


def test_an_ordinary_error_has_no_machine_cause():
    assert cause_of("ValueError: expected 3 channels", "CUDA out of memory. Tried to allocate 2 GiB") is None


# -- GPUs that NVML cannot count ---------------------------------------------------------------


def test_gpu_device_nodes_are_what_makes_the_audit_ask_torch(tmp_path):
    (tmp_path / "nvidiactl").touch()
    assert gpu_device_nodes(str(tmp_path)) == []  # the control node alone is no GPU
    (tmp_path / "nvidia0").touch()
    (tmp_path / "kfd").touch()
    assert gpu_device_nodes(str(tmp_path)) == [str(tmp_path / "kfd"), str(tmp_path / "nvidia0")]


def test_torch_counts_rocm_gpus_and_says_so(tmp_path):
    rocm = tmp_path / "python"  # stands in for a ROCm build's interpreter: its torch's answer
    rocm.write_text("#!/bin/sh\necho '[8, \"6.2.41133-dd7f95766\"]'\n")
    rocm.chmod(0o755)
    assert torch_gpu_count(str(rocm)) == GpuCount(8, "torch (ROCm/HIP)")
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho Traceback >&2; exit 1\n")
    broken.chmod(0o755)
    assert torch_gpu_count(str(broken)) == GpuCount(0, "")


def test_without_nvml_and_with_gpu_nodes_the_real_torch_is_asked(tmp_path):
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    (tmp_path / "kfd").touch()
    # this machine has no driver: NVML is unavailable, torch (a CPU build) answers 0
    assert count_gpus({}, dev=str(tmp_path)) == GpuCount(0, "")


def test_a_torch_count_lets_nccl_run_and_names_its_source(monkeypatch):
    counted = GpuCount(4, "torch (ROCm/HIP)")
    monkeypatch.setattr(audit, "count_gpus", lambda environ: counted)
    nproc, backend, gpus, on_cpu = audit._validate(RuntimeOptions(script=Path(__file__), backend="auto"))
    assert (nproc, backend, gpus, on_cpu) == (4, "nccl", counted, False)  # RCCL answers to "nccl" in torch
    monkeypatch.setattr("ddplint.runtime.checks.host.installed_torch_cuda", lambda: None)
    checks = {r.check: r for r in run_host_checks(OPTIONS, 4, 0, environ={}, counted=counted)}
    if checks["gpu.inventory"].status is Status.SKIP:  # no NVML here (the usual CI machine)
        assert checks["gpu.inventory"].summary.endswith(
            "4 GPUs counted by torch (ROCm/HIP); their memory, processes and health are not checked"
        )
    else:  # a machine with an NVIDIA driver reads its GPUs through NVML as usual
        assert "counted by torch" not in checks["gpu.inventory"].summary


def _bound(rank, uuid, bus, group="0"):
    return RankRecord.from_plain(
        {
            "rank": rank,
            "status": "completed",
            "info": {"hostname": f"n{group}", "env": {"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": group}},
            "binding": {
                "device_type": "cuda",
                "gpu": {"index": 0, "name": "AMD Instinct MI250X", "uuid": uuid, "pci_bus_id": bus},
            },
        }
    )


def test_gpus_without_uuids_are_told_apart_by_node_and_pci_bus():
    apart = distinct_check([_bound(0, "", "00000000:C1:00.0"), _bound(1, "", "00000000:C6:00.0")])
    assert apart.status is Status.PASS, apart.summary
    shared = distinct_check([_bound(0, "", "00000000:C1:00.0"), _bound(1, "", "00000000:C1:00.0")])
    assert shared.status is Status.FAIL
    assert shared.summary == "ranks 0-1 share GPU cuda:0 PCI 00000000:C1:00.0 on node 0 (n0)"
    nodes = distinct_check([_bound(0, "", "00000000:C1:00.0", "0"), _bound(1, "", "00000000:C1:00.0", "1")])
    assert nodes.status is Status.PASS  # the same bus id on two nodes is two GPUs
    unknown = distinct_check([_bound(0, "", None), _bound(1, "", None)])
    assert unknown.status is Status.SKIP  # never a false "ranks share a GPU"
