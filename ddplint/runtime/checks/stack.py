"""Software stack: which CUDA the driver supports against which CUDA torch was built for.

The same judgement serves the host (reading torch's version file, no import) and the ranks
(asking the imported torch), so a driver that is too old reads the same in both places.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ddplint.runtime.checks.common import Findings, group_by
from ddplint.runtime.registry import STACK_VERSIONS
from ddplint.runtime.verdict import CheckResult, Status

if TYPE_CHECKING:
    from ddplint.runtime.records import RankRecord, Versions

# Oldest Linux driver per CUDA toolkit release (NVIDIA CUDA release notes, table 3).
MIN_DRIVER = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}


def driver_cuda_text(value: int | None) -> str:
    """nvmlSystemGetCudaDriverVersion's 12040 -> "12.4"."""
    return "?" if value is None else f"{value // 1000}.{value % 1000 // 10}"


def cuda_compat(driver_version: str, driver_cuda: int, runtime: str) -> tuple[Status, str, str | None]:
    """(status, one line with both numbers, fix) for a driver and torch's CUDA runtime."""
    major, minor = (int(x) for x in runtime.split(".")[:2])
    dmajor, dminor = driver_cuda // 1000, driver_cuda % 1000 // 10
    need = MIN_DRIVER.get((major, minor))
    upgrade = (
        f"upgrade the NVIDIA driver to {need} or newer"
        if need
        else f"upgrade the NVIDIA driver to one that supports CUDA {runtime}"
    )
    both = f"driver {driver_version} supports CUDA {dmajor}.{dminor}; torch was built for CUDA {runtime}"
    if dmajor < major:
        return (Status.FAIL, f"{both}: torch cannot use the GPUs", f"{upgrade}, or install a torch build for CUDA {dmajor}.x")
    if dmajor == major and dminor < minor:
        return (
            Status.WARN,
            f"{both}: runs only through CUDA minor-version compatibility (kernels that need PTX JIT fail)",
            upgrade,
        )
    return Status.PASS, both, None


def installed_torch_cuda() -> tuple[str, str | None] | None:
    """(torch version, CUDA version or None) read from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    version = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
    cuda = re.search(r"^cuda\s*(?::[^=]+)?=\s*(?:['\"]([^'\"]+)['\"]|None)", text, re.M)
    if version is None:
        return None
    return version.group(1), cuda.group(1) if cuda else None


# ---- inside each rank -------------------------------------------------------------------


def script_path() -> str | None:
    """The user's script: the probe runs as `python -m ddplint.runtime.probe RUNDIR SCRIPT ...`
    and sets sys.argv to the script's own only when it starts it."""
    import sys

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name == "ddplint.runtime.probe":
        return sys.argv[2] if len(sys.argv) > 2 else None
    return sys.argv[0] if sys.argv and sys.argv[0] else None


def _sha256(path: str | None) -> str | None:
    import hashlib

    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _git_commit(path: str | None) -> str | None:
    import subprocess

    if not path or not Path(path).is_file():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(Path(path).resolve().parent), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def installed_packages() -> list[str]:
    import importlib.metadata

    return sorted(
        {f"{(d.metadata['Name'] or '?').lower().replace('_', '-')}=={d.version}" for d in importlib.metadata.distributions()}
    )


def collect_versions() -> dict:
    """What must be identical on every rank and node, as this rank sees it."""
    import hashlib
    import platform

    import torch

    nccl = None
    if torch.distributed.is_nccl_available() and torch.cuda.is_available():
        try:
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except (AttributeError, RuntimeError):
            nccl = None
    packages = installed_packages()
    script = script_path()
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # TorchVersion: keep records plain data
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": nccl,
        "nccl_available": torch.distributed.is_nccl_available(),
        "cuda_available": torch.cuda.is_available(),
        "device_count": torch.cuda.device_count(),
        # the GPU architectures this build has kernels for (compile-time flags: no CUDA init)
        "arch_list": torch.cuda.get_arch_list() if torch.cuda.is_available() else [],
        "packages": packages,
        "packages_hash": hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16],
        "script": script,
        "script_sha256": _sha256(script),
        "git_commit": _git_commit(script),
    }


_ARCH = re.compile(r"^(sm|compute)_(\d+?)(\d)([a-z]?)$")


def runs_on(arch_list: list[str], capability: list[int]) -> bool:
    """Whether a build with these architectures has code for a GPU of this compute capability.

    Machine code (sm_XY) runs on the same major version at an equal or higher minor (sm_80 on
    8.6); PTX (compute_XY) is compiled by the driver for any equal or newer GPU. Code for an
    architecture-specific variant (sm_90a) runs only on that exact GPU.
    """
    for arch in arch_list:
        m = _ARCH.match(arch)
        if m is None:
            continue
        kind, major, minor, variant = m[1], int(m[2]), int(m[3]), m[4]
        if variant:
            if [major, minor] == list(capability):
                return True
        elif kind == "sm" and major == capability[0] and minor <= capability[1]:
            return True
        elif kind == "compute" and (major, minor) <= (capability[0], capability[1]):
            return True
    return False


def _without_kernels(arch_list: list[str] | None, gpus: list[dict]) -> list[tuple[str, list[int]]]:
    """(name, capability) of each distinct visible GPU this torch build has no code for."""
    if not arch_list:  # a CPU build, or a torch that does not say
        return []
    seen: dict[tuple, str] = {}
    for gpu in gpus:
        cc = gpu.get("capability")
        if cc and tuple(cc) not in seen and not runs_on(arch_list, cc):
            seen[tuple(cc)] = gpu.get("name", "GPU")
    return [(name, list(cc)) for cc, name in seen.items()]


def _versions(rec: RankRecord) -> Versions:
    assert rec.info.versions is not None  # only ranks that reported their versions are grouped
    return rec.info.versions


def versions_check(records: list[RankRecord]) -> CheckResult:
    """stack.versions: torch, CUDA, cuDNN, NCCL, Python, and torch's view of the GPUs against NVML's."""
    by_rank = {r.rank: r for r in records}
    nodes = group_by([r for r in records if r.info.versions], lambda r: r.where)
    if not nodes:
        return CheckResult(STACK_VERSIONS, Status.SKIP, "no rank reported its versions")
    found = Findings()
    evidence = []
    for where, ranks in nodes.items():
        v = _versions(by_rank[ranks[0]])
        nv = next((nvml for r in ranks if (nvml := by_rank[r].info.nvml)), None)
        evidence.append(
            f"{where}: Python {v.python}, torch {v.torch}, CUDA "
            f"{v.cuda or 'none (CPU build)'}, cuDNN {v.cudnn or '-'}, NCCL {v.nccl or '-'}; "
            f"torch.cuda.is_available()={v.cuda_available}, device_count()={v.device_count}"
        )
        if nv is None:
            continue
        if nv.error:
            evidence.append(f"{where}: {nv.error}")
            continue
        seen = nv.visible
        evidence.append(
            f"{where}: NVML driver {nv.driver_version} (CUDA {driver_cuda_text(nv.cuda_driver_version)}), {seen} GPUs visible"
        )
        compat = None
        if v.cuda and nv.driver_version and nv.cuda_driver_version is not None:
            compat = cuda_compat(nv.driver_version, nv.cuda_driver_version, v.cuda)
            if compat[0] is not Status.PASS:
                found.add(compat[0], f"{where}: {compat[1]}", compat[2])
        if seen and not v.cuda_available:
            why = (
                "torch is a CPU-only build"
                if not v.cuda
                else (compat[1] if compat and compat[0] is Status.FAIL else "see the torch warning")
            )
            found.add(
                Status.FAIL,
                f"{where}: torch.cuda.is_available() is False while NVML sees {seen} GPUs ({why})",
                compat[2] if compat and compat[2] else "install a CUDA build of torch that matches the driver",
            )
        elif v.cuda_available and v.device_count != seen:
            found.add(
                Status.WARN,
                f"{where}: torch sees {v.device_count} GPUs, NVML {seen}",
                "check CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER in the launch environment",
            )
        for name, capability in _without_kernels(v.arch_list, nv.gpus):
            cc = f"{capability[0]}.{capability[1]}"
            found.add(
                Status.FAIL,
                f"{where}: torch {v.torch} has no kernels for the {name} "
                f"(compute capability {cc}, sm_{capability[0]}{capability[1]}); "
                f"it was built for {', '.join(v.arch_list)}",
                "install a torch build for a newer CUDA that lists sm_"
                f"{capability[0]}{capability[1]} in torch.cuda.get_arch_list(); until then "
                "every kernel fails with 'no kernel image is available'",
            )
    if found.items:
        return CheckResult(STACK_VERSIONS, found.status, found.summary, evidence, found.fix)
    v = _versions(by_rank[next(iter(nodes.values()))[0]])
    return CheckResult(
        STACK_VERSIONS,
        Status.PASS,
        f"torch {v.torch} (CUDA {v.cuda or 'none'}), Python {v.python}" + ("" if len(nodes) == 1 else f" on {len(nodes)} nodes"),
        evidence,
    )
