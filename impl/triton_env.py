"""One Triton mode per process: interpreted for CPU tensors, compiled for CUDA ones.

Triton picks the mode of a `@triton.jit` function when the function is decorated, so `TRITON_INTERPRET` must
be settled before `impl.triton_kernels` is imported; `prepare_triton` settles it or says why it cannot.
"""

from __future__ import annotations

import os
import sys

import torch

KERNELS_MODULE = "impl.triton_kernels"


class TritonModeError(RuntimeError):
    """The process's Triton mode (interpreted or compiled) does not fit the device asked for."""


def wants_interpreter(device: str | torch.device) -> bool:
    """CPU tensors run through the Triton interpreter; every other device runs compiled kernels."""
    return torch.device(device).type == "cpu"


def require_mode(interpreted: bool, device: str | torch.device, source: str) -> None:
    """Raise `TritonModeError` unless `interpreted` is the mode `device` needs; `source` says who fixed it."""
    if interpreted == wants_interpreter(device):
        return
    if interpreted:
        raise TritonModeError(
            f"{source} with TRITON_INTERPRET=1, so its kernels cannot run compiled on {device}; "
            "run the CUDA backend in a process without TRITON_INTERPRET"
        )
    raise TritonModeError(
        f"{source} without TRITON_INTERPRET=1, so its kernels cannot run on {device}; call "
        "impl.triton_env.prepare_triton('cpu') before anything imports impl.triton_kernels"
    )


def prepare_triton(device: str | torch.device) -> None:
    """Make the Triton kernels runnable on `device`: set TRITON_INTERPRET=1 for CPU, or raise if too late."""
    kernels = sys.modules.get(KERNELS_MODULE)
    if kernels is not None:
        require_mode(kernels.INTERPRETED, device, f"{KERNELS_MODULE} was imported")
        return
    if wants_interpreter(device):
        os.environ["TRITON_INTERPRET"] = "1"
    import triton

    # An explicit `triton.knobs.runtime.interpret = ...` overrides the environment, so ask the knob itself.
    require_mode(bool(triton.knobs.runtime.interpret), device, "triton was configured")
