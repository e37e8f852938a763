"""Machine problems that reach a rank as a generic CUDA or NCCL error, told by their text.

A driver upgraded without a reboot, a Fabric Manager that is not running, a torch without
kernels for the GPU and two ranks on one GPU all end the script with an error that suggests
reinstalling torch or checking the network. The report names the cause and its fix instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddplint.runtime.checks.binding import BIND_FIX
from ddplint.runtime.checks.health import FABRIC_FIX
from ddplint.runtime.nvml import REBOOT_FIX
from ddplint.runtime.registry import BIND_DISTINCT, IO_SANDBOX, STACK_VERSIONS


@dataclass(frozen=True)
class Cause:
    pattern: re.Pattern[str]
    what: str  # the cause, in the user's terms
    fix: str


CAUSES = (
    Cause(
        re.compile(
            r"\berror 803\b|unsupported display driver / cuda driver combination|"
            r"Driver/library version mismatch",
            re.I,
        ),
        "the NVIDIA kernel module and the user-space driver differ (CUDA error 803): the driver was upgraded without a reboot",
        REBOOT_FIX,
    ),
    Cause(
        re.compile(r"\berror 804\b|forward compatibility was attempted on non supported HW", re.I),
        "CUDA forward compatibility is not supported on this GPU (CUDA error 804): a "
        "cuda-compat library is loaded on a GPU that cannot use it",
        "take the cuda-compat directory out of LD_LIBRARY_PATH, or install a torch built for "
        "the CUDA version the driver supports",
    ),
    Cause(
        re.compile(r"\berror 802\b|system not yet initialized", re.I),
        "the GPUs are not ready (CUDA error 802): on an NVSwitch system the NVIDIA Fabric Manager is not running",
        FABRIC_FIX,
    ),
    Cause(
        re.compile(r"no kernel image is available for execution on the device", re.I),
        "this torch build has no kernels for the GPU's architecture",
        "install a torch build whose CUDA version supports the GPU: "
        f"torch.cuda.get_arch_list() must list its sm_XY (see {STACK_VERSIONS})",
    ),
    Cause(
        re.compile(r"\[Errno 30\] Read-only file system|\bEROFS\b"),
        "a write to a read-only file system: a mount that is read-only on this machine, or one the "
        "audit's sandbox could not put under a copy-on-write layer and made read-only instead "
        f"({IO_SANDBOX} names it), so that nothing reaches your disk",
        "write the job's outputs to a writable directory, or run the audit with --no-sandbox to let the job write there for real",
    ),
    Cause(
        re.compile(r"Value too large for defined data type|\bEOVERFLOW\b"),
        "a write below a directory of another user (root's, a shared tree): the audit's sandbox, "
        "running without privilege, cannot copy that directory into its copy-on-write layer",
        "name the output directory among the script's arguments (it then gets a layer of its own "
        "and the write works), or run the audit as that directory's owner or with --no-sandbox",
    ),
    Cause(
        re.compile(r"Duplicate GPU detected|Multiple Ranks are using the same GPU", re.I),
        f"two ranks drive the same GPU (see {BIND_DISTINCT})",
        BIND_FIX,
    ),
)


def cause_of(*texts: str | None) -> Cause | None:
    """The first known cause that any of the texts shows."""
    for cause in CAUSES:
        if any(text and cause.pattern.search(text) for text in texts):
            return cause
    return None
