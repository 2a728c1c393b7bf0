"""The model imports no torch: every `model` module, imported in a fresh interpreter, leaves `torch` out of
`sys.modules`, and so do the vocabulary and the invariant catalog it builds on (torch belongs to the pools)."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import model

REPO_ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))))
"""


def _torch_modules_after_importing(names: list[str]) -> list[str]:
    """The torch modules a fresh interpreter holds after importing `names`, in order."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def model_modules() -> list[str]:
    return sorted(info.name for info in pkgutil.walk_packages(model.__path__, "model."))


def test_every_model_module_is_imported_by_the_probe() -> None:
    names = model_modules()
    assert {"model.actions", "model.concrete", "model.theorems", "model.prove", "model.__main__"} <= set(names)
    assert "model.pagemath" not in names  # the dead copy of the page arithmetic is gone


def test_importing_every_model_module_loads_no_torch() -> None:
    assert _torch_modules_after_importing(model_modules()) == []


def test_the_vocabulary_and_the_catalog_load_no_torch() -> None:
    names = ["properties", "properties.vocabulary", "properties.invariants", "properties.abstraction"]
    assert _torch_modules_after_importing(names) == []


def test_the_probe_sees_torch_where_it_is_imported() -> None:
    assert "torch" in _torch_modules_after_importing(["impl.engine"])
