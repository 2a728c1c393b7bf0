"""Import-time compatibility for upstream SGLang on a CPU-only venv: a narrow stand-in for `torchvision`.

sglang imports a few torchvision names at module level on the way to its pool classes: `sglang.srt.configs`
(vision-model configs) takes `InterpolationMode` and `functional` from `torchvision.transforms`, and 0.5.18's
`sglang.srt.utils.common` takes `decode_jpeg` from `torchvision.io`. No CPU torchvision wheel matches the
pinned CPU torch and the pool classes never call those names, so the adapter registers a stub that carries
exactly them; calling the stub's `decode_jpeg` raises.
"""

from __future__ import annotations

import enum
import importlib.util
import sys
import types
from typing import NoReturn

STUB_MARKER = "__kvlife_stub__"


class InterpolationMode(enum.Enum):
    """The names `torchvision.transforms.InterpolationMode` has; only referenced, never used for images."""

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


def install_torchvision_stub() -> bool:
    """Register the stub when torchvision cannot be imported; return whether the stub is in place."""
    if STUB_MARKER in vars(sys.modules.get("torchvision", types.ModuleType("absent"))):
        return True
    if importlib.util.find_spec("torchvision") is not None:
        return False
    # transformers caches is_torchvision_available(); it must read False (the truth) before the stub
    # makes find_spec succeed, or transformers would route image processing through the stub.
    from transformers.utils import import_utils

    assert import_utils.is_torchvision_available() is False
    functional = _module("torchvision.transforms.functional", InterpolationMode=InterpolationMode)
    transforms = _module("torchvision.transforms", InterpolationMode=InterpolationMode, functional=functional)
    io = _module("torchvision.io", decode_jpeg=decode_jpeg)
    root = _module("torchvision", transforms=transforms, io=io)
    for module in (root, transforms, functional, io):
        sys.modules[module.__name__] = module
    return True
