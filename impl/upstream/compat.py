"""Import-time compatibility for upstream SGLang on a CPU-only venv: a narrow stand-in for `torchvision`.

sglang's `mem_cache.memory_pool` imports `sglang.srt.configs`, whose vision-model configs import names from
`torchvision.transforms` at module level. No CPU torchvision wheel matches the pinned CPU torch, and the pool
classes never use those names, so the adapter registers a stub that carries exactly the imported names.
"""

from __future__ import annotations

import enum
import importlib.util
import sys
import types

STUB_MARKER = "__kvlife_stub__"


class InterpolationMode(enum.Enum):
    """The names `torchvision.transforms.InterpolationMode` has; only referenced, never used for images."""

    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


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
    root = _module("torchvision", transforms=transforms)
    sys.modules.update(
        {"torchvision": root, "torchvision.transforms": transforms, "torchvision.transforms.functional": functional}
    )
    return True
