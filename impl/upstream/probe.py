"""Run a small lifecycle on the upstream target and print what the pool looks like after each step.

    .venv-sglang-0.5.23/bin/python -m impl.upstream.probe

Exit 0 when every step did what the contract says (legal steps complete, forbidden ones are refused), 1 when
one did not, 2 when sglang is missing or unsupported here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from impl.target import PoolConfig, PoolSnapshot, Refused
from impl.upstream.dialects import UnsupportedUpstream
from impl.upstream.target import SglangPool

# (label, call, whether the contract lets it complete)
Step = tuple[str, Callable[[SglangPool], object], bool]

STEPS: list[Step] = [
    ("admit req 0, 5 tokens", lambda p: p.admit(0, 5), True),
    ("extend req 0, 3 tokens (next chunk)", lambda p: p.extend(0, 3), True),
    ("decode req 0", lambda p: p.decode(0), True),
    ("admit req 1, 4 tokens", lambda p: p.admit(1, 4), True),
    ("finish req 0", lambda p: p.finish(0), True),
    ("release_again req 0 (already released)", lambda p: p.release_again(0), False),
    ("free_row req 0 (already freed)", lambda p: p.free_row(0), False),
    ("decode req 0 (finished)", lambda p: p.decode(0), False),
    ("reuse_released req 0 on row 3 (stale row)", lambda p: p.reuse_released(0, 3, 2), False),
    ("pp_release req 1", lambda p: p.pp_release(1), True),
    ("admit req 2, 3 tokens", lambda p: p.admit(2, 3), True),
    ("flush (req 2 still running)", lambda p: p.flush(), False),
    ("retract req 2", lambda p: p.retract(2), True),
    ("abort req 2 (waiting)", lambda p: p.abort(2), True),
    ("flush (idle)", lambda p: p.flush(), True),
]


def describe(snap: PoolSnapshot) -> str:
    """A few lines naming every record and the free lists."""
    lines = [f"  free rows {snap.free_rows}  generations {snap.row_generation}"]
    lines.append(f"  free slots {snap.free_slots.numel()}: {snap.free_slots.tolist()}")
    for rid, view in sorted(snap.records.items()):
        slots = snap.row_slots.get(rid, [])
        lines.append(
            f"  req {rid}: {view.status:8} row={view.row} P={view.protected_len} C={view.committed_len} "
            f"A={view.allocated_len} chunks={view.inflight_middle_chunks} slots={slots}"
        )
    return "\n".join(lines)


def run_step(pool: SglangPool, label: str, call: Callable[[SglangPool], object], legal: bool) -> bool:
    """Run one step, print its outcome and the snapshot; return whether the outcome matched the contract."""
    try:
        result = call(pool)
        outcome = f"ok ({result})" if result is not None else "ok"
        completed = True
    except Refused as exc:
        outcome, completed = f"refused: {exc}", False
    verdict = "as expected" if completed == legal else "UNEXPECTED"
    print(f"{label}: {outcome} [{verdict}]\n{describe(pool.snapshot())}")
    return completed == legal


def main() -> int:
    started = time.perf_counter()
    try:
        pool = SglangPool(PoolConfig(rows=4, tokens=32, width=16))
    except UnsupportedUpstream as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return 2
    print(f"sglang {pool.version}: loaded and built in {time.perf_counter() - started:.1f} s")
    print(f"initial\n{describe(pool.snapshot())}")
    matched = [run_step(pool, label, call, legal) for label, call, legal in STEPS]
    print(f"probe: {sum(matched)} of {len(matched)} steps as the contract says")
    return 0 if all(matched) else 1


if __name__ == "__main__":
    sys.exit(main())
