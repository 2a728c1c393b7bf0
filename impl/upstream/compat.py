"""Import-time compatibility for upstream SGLang in a CPU-only venv: a narrow stand-in for `torchvision`.

On the way to its pool classes sglang imports a few torchvision names at module level: `sglang.srt.configs`
(vision-model configs) takes `InterpolationMode` and `functional` from `torchvision.transforms`, and 0.5.18's
`sglang.srt.utils.common` takes `decode_jpeg` from `torchvision.io`. No CPU torchvision wheel matches the
pinned CPU torch, and the pool classes never call those names, so `prepare_sglang_import` registers a stub that
carries exactly them. One more repair is needed for 0.5.18's pinned transformers (see
`repair_auto_image_processor`). Both are applied only by the upstream adapter, never by the reference pool or
the harness. Triton's interpreter is switched on here too (`interpret_triton`): Triton fixes the mode of a
`@triton.jit` function when sglang's module is imported, and 0.5.18's paged allocator always launches its kernels.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import sys
import types
from typing import NoReturn

from impl.triton_env import prepare_triton

STUB_MARKER = "__kvlife_stub__"


class InterpolationMode(enum.Enum):
    """The members sglang's configs name from `torchvision.transforms.InterpolationMode`; never used on images."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def decode_jpeg(*args: object, **kwargs: object) -> NoReturn:
    """Stands in for `torchvision.io.decode_jpeg`; image decoding has no place in the pool classes."""
    raise RuntimeError("torchvision is absent; kvlife's stub cannot decode images")


def _module(name: str, **attrs: object) -> types.ModuleType:
    module = types.ModuleType(name, "stub registered by kvlife's upstream adapter; torchvision is absent")
    setattr(module, STUB_MARKER, True)
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def torchvision_stubbed() -> bool:
    """Whether the module registered as `torchvision` is this stub."""
    return bool(getattr(sys.modules.get("torchvision"), STUB_MARKER, False))


def install_torchvision_stub() -> bool:
    """Register the stub when torchvision cannot be imported; return whether the stub is in place."""
    if torchvision_stubbed():
        return True
    if importlib.util.find_spec("torchvision") is not None:
        return False
    # transformers caches is_torchvision_available(); it must read False (the truth) before the stub makes
    # find_spec succeed, or transformers would route image processing through the stub.
    from transformers.utils import import_utils

    if import_utils.is_torchvision_available():
        raise RuntimeError("transformers reports torchvision available although it cannot be imported")
    functional = _module("torchvision.transforms.functional", InterpolationMode=InterpolationMode)
    transforms = _module("torchvision.transforms", InterpolationMode=InterpolationMode, functional=functional)
    io = _module("torchvision.io", decode_jpeg=decode_jpeg)
    root = _module("torchvision", transforms=transforms, io=io)
    for module in (root, transforms, functional, io):
        sys.modules[module.__name__] = module
    return True


def repair_auto_image_processor() -> bool:
    """Expose transformers' real `AutoImageProcessor` where the release hides it without torchvision; return
    whether it had to."""
    # transformers 5.12.1 (pinned by sglang 0.5.18) files models/auto/image_processing_auto.py under the
    # torchvision backend because the file mentions `TorchvisionBackend`, so its top-level AutoImageProcessor
    # is a placeholder that raises, and sglang's configs call AutoImageProcessor.register at import. The real
    # class needs only PIL; 5.18 and later file it correctly.
    from transformers.utils.import_utils import DummyObject

    # processing_utils re-executes transformers/__init__ and replaces sys.modules["transformers"]; import it
    # first so the repair lands on the module that stays.
    importlib.import_module("transformers.processing_utils")
    top = sys.modules["transformers"]
    if not isinstance(top.AutoImageProcessor, DummyObject):
        return False
    auto_module = importlib.import_module("transformers.models.auto.image_processing_auto")
    vars(top)["AutoImageProcessor"] = auto_module.AutoImageProcessor
    return True


def interpret_triton(device: str = "cpu") -> None:
    """On CPU set `TRITON_INTERPRET=1` so that sglang's kernels (the paged allocator's `alloc_extend_kernel` and
    `alloc_decode_kernel`) run interpreted on CPU tensors; on CUDA leave it unset, so they compile. Raises
    `TritonModeError` when Triton was already configured for the other mode in this process (a CPU run's
    interpreter never reaches a CUDA run: the modes cannot share a process)."""
    prepare_triton(device)


def prepare_sglang_import(device: str = "cpu") -> None:
    """Everything that must happen before the first `import sglang` in a venv without torchvision."""
    interpret_triton(device)
    install_torchvision_stub()
    repair_auto_image_processor()
