"""Software stack: which CUDA the driver supports against which CUDA torch was built for.

The same judgement serves the host (reading torch's version file, no import) and the ranks
(asking the imported torch), so a driver that is too old reads the same in both places.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from ddplint.runtime.verdict import Status

# Oldest Linux driver per CUDA toolkit release (NVIDIA CUDA release notes, table 3).
MIN_DRIVER = {
    (11, 8): "520.61.05", (12, 0): "525.60.13", (12, 1): "530.30.02", (12, 2): "535.54.03",
    (12, 3): "545.23.06", (12, 4): "550.54.14", (12, 5): "555.42.02", (12, 6): "560.28.03",
    (12, 8): "570.26", (12, 9): "575.51.03", (13, 0): "580.65.06",
}


def driver_cuda_text(value: int) -> str:
    """nvmlSystemGetCudaDriverVersion's 12040 -> "12.4"."""
    return f"{value // 1000}.{value % 1000 // 10}"


def cuda_compat(driver_version: str, driver_cuda: int, runtime: str) -> tuple[Status, str, str | None]:
    """(status, one line with both numbers, fix) for a driver and torch's CUDA runtime."""
    major, minor = (int(x) for x in runtime.split(".")[:2])
    dmajor, dminor = driver_cuda // 1000, driver_cuda % 1000 // 10
    need = MIN_DRIVER.get((major, minor))
    upgrade = f"upgrade the NVIDIA driver to {need} or newer" if need else \
        f"upgrade the NVIDIA driver to one that supports CUDA {runtime}"
    both = (f"driver {driver_version} supports CUDA {dmajor}.{dminor}; "
            f"torch was built for CUDA {runtime}")
    if dmajor < major:
        return (Status.FAIL, f"{both}: torch cannot use the GPUs",
                f"{upgrade}, or install a torch build for CUDA {dmajor}.x")
    if dmajor == major and dminor < minor:
        return (Status.WARN, f"{both}: runs only through CUDA minor-version compatibility "
                "(kernels that need PTX JIT fail)", upgrade)
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
