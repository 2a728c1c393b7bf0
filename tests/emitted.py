"""An emitted regression test (`fuzz emit`), loaded as pytest would: the one test function of the one file
written under `out`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fuzz.__main__ import main as fuzz_main


def emitted_test(counterexample: Path, out: Path) -> Callable[[], None]:
    """Emit `counterexample` into `out` and return its test function."""
    assert fuzz_main(["emit", str(counterexample), "--out", str(out)]) == 0
    (test_file,) = out.glob("test_*.py")
    namespace: dict[str, object] = {}
    exec(compile(test_file.read_text(), str(test_file), "exec"), namespace)
    (test,) = [f for name, f in namespace.items() if name.startswith("test_")]
    return test  # type: ignore[return-value]
