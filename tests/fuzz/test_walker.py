"""The seeded walker: a seed replays its run exactly, faults are found and shrunk to a few steps that `fuzz replay`
reproduces, fault-free walks find nothing, every op the target implements is drawn, and coverage grows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.__main__ import main as fuzz_main
from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from fuzz.replay import replay
from fuzz.targets import target_ops
from fuzz.unchecked import unchecked
from fuzz.walker.cli import main as walker_main
from fuzz.walker.hunt import hunt
from fuzz.walker.rules import EVERY_STATUS, FORBIDDEN, LEGAL, RULES, drawn_params, rule_for
from fuzz.walker.shrink import shrink
from fuzz.walker.walk import Walker, WalkResult
from model.actions import Action
from model.state import Sizes
from model.trace import Failure, Step, Trace, load

CHUNK = {**POOLS["chunk-p1"], "faults": []}
RADIX = {**POOLS["radix-p4"], "faults": []}


def test_a_seed_replays_its_unshrunk_run_exactly() -> None:
    config = {**CHUNK, "faults": ["release_len_from_token_counts"]}
    first, second = Walker(config, 7).run(steps=2_000), Walker(config, 7).run(steps=2_000)
    assert first.failure is not None and first.trace is not None and second.trace is not None
    assert (first.steps, first.failure, first.trace.steps) == (second.steps, second.failure, second.trace.steps)
    replayed = replay(Trace(config, 7, first.trace.steps))
    assert replayed.failure is not None
    assert (replayed.failure.kind, replayed.failure.id, replayed.failure.step) == (
        first.failure.kind,
        first.failure.id,
        first.failure.step,
    )


def test_a_fault_free_run_is_the_same_run_twice() -> None:
    first, second = Walker(RADIX, 3).run(steps=600), Walker(RADIX, 3).run(steps=600)
    assert first.failure is None
    assert first.coverage.transitions == second.coverage.transitions
    assert first.ops == second.ops


@pytest.mark.parametrize(
    ("fault", "pool"),
    [
        ("legacy_reuse_guard", "chunk-p1"),
        ("offload_presence_guard", "chunk-p1"),
        ("chunk_rematch_lock_leak", "radix-p4"),
        ("skip_overalloc_free_on_finish", "radix-p4"),
    ],
)
def test_a_fault_is_found_shrunk_and_replays(tmp_path: Path, fault: str, pool: str) -> None:
    config = {**POOLS[pool], "faults": [fault]}
    found = next(r for seed in range(20) if (r := hunt(config, seed, tmp_path, steps=2_000)).counterexample)
    assert found.counterexample is not None and found.walk.trace is not None
    trace = load(found.counterexample)
    assert len(trace.steps) <= 12
    assert len(trace.steps) <= len(found.walk.trace.steps)
    assert trace.meta["source"] == "walker" and trace.seed == found.walk.seed and trace.meta["shrunk"] is True
    assert trace.failure is not None and trace.failure.kind == found.walk.failure.kind  # type: ignore[union-attr]
    assert fuzz_main(["replay", str(found.counterexample)]) == 1
    assert fuzz_main(["replay", str(found.counterexample), "--faults", "none"]) == 0
    assert walker_main(["replay-seed", str(found.counterexample)]) == 1


def test_the_shrink_folds_a_chunk_into_the_prefill_step_before_it() -> None:
    """Two chunks where one longer chunk fails the same way: deleting either alone loses the failure, folding the
    second into the first keeps it (as Hypothesis's shrink finds: 3 steps)."""
    config = {**POOLS["radix-p4"], "faults": ["chunk_rematch_lock_leak"]}
    steps = [
        Step("admit", {"req": 0, "prompt": 5, "n": 1, "family": 0, "kind": 0}),
        Step("extend", {"req": 0, "n": 3}),
        Step("extend", {"req": 0, "n": 1}),
        Step("retract", {"req": 0}),
    ]
    found = replay(Trace(config, None, steps))
    assert found.failure is not None and found.failure.step == 3
    shrunk = shrink(config, found.steps, found.failure, 10.0)
    assert [s.op for s in shrunk.steps] == ["admit", "extend", "retract"]
    assert shrunk.steps[0].args["n"] == 4 and (shrunk.failure.kind, shrunk.failure.id) == (
        "invariant",
        "tree-lock-holders",
    )


@pytest.mark.parametrize("pool", sorted(POOLS))
def test_a_fault_free_walk_finds_nothing(pool: str) -> None:
    result = Walker({**POOLS[pool], "faults": []}, 11).run(steps=1_500)
    assert result.failure is None, result.failure
    assert result.steps == 1_500


def test_every_op_the_target_implements_is_drawn() -> None:
    drawn: set[str] = set()
    for seed in range(8):
        drawn |= set(Walker(RADIX, seed).run(steps=400).ops)
    # Every walk ends with a drain; a tree that evicts only in its own step has no prefill round (its rule).
    assert not RULES["prefill_round"].pool(Sizes(4, 64, 32, 4, radix=True))
    assert drawn == (target_ops(RADIX) - {"prefill_round"}) | {"drain"}
    on_demand = {**POOLS["radix-p1"], "faults": []}
    assert "prefill_round" in set(Walker(on_demand, 0).run(steps=400).ops)


class _BatchTally(Walker):
    """A walker that tallies every unchecked batch it sends, over all its walks (each walk a fresh lockstep)."""

    sent = refused = 0

    def _step(self, result: WalkResult) -> tuple[Failure | None, bool]:
        failure, done = super()._step(result)
        last = self.lock.steps[-1] if self.lock.steps and not done else None
        if last is not None and last.op == "batch" and last.args.get("unchecked"):
            self.sent += 1
            self.refused += not last.choice
        return failure, done


def test_the_walker_sends_batches_unchecked_and_the_allocation_paths_refuse_them() -> None:
    """Some swarms send batches past the scheduler's budget (`fuzz.unchecked`): the allocation paths' own
    out-of-memory refusals are reached, each one a batch whose first allocation fails."""
    sent, refused = 0, 0
    for seed in range(12):
        walker = _BatchTally(CHUNK, seed)
        result = walker.run(steps=800)
        assert result.failure is None, result.failure
        sent, refused = sent + walker.sent, refused + walker.refused
    assert sent > 0 and refused > 0, (sent, refused)


def test_an_unchecked_batch_is_drawn_only_where_its_first_allocation_fails() -> None:
    lock = Lockstep(CHUNK)
    one_admission = {"size": 1, "op0": 0, "req0": 0, "n0": 4, "prompt0": 4, "family0": 0, "kind0": 0}
    assert unchecked(lock, one_admission) is None  # rows to spare: the rows succeed, a slot shortfall comes after
    five = {"size": 5, **{f"{k}{i}": v for i in range(5) for k, v in (("op", 0), ("req", i), ("n", 4))}}
    assert unchecked(lock, five) == {**five, "unchecked": 1}  # more admissions than the 4 free rows


def test_an_op_the_table_does_not_name_is_derived_from_its_action() -> None:
    sizes = Sizes(4, 64, 32)
    plain = Action("frobnicate", (("req", "req"), ("n", "len"), ("row", "row")), lambda *a: True, lambda *a: a[2])
    negative = Action("unfrobnicate", (("req", "req"),), lambda *a: False, lambda *a: a[2], negative=True)
    assert "frobnicate" not in RULES
    assert rule_for("frobnicate", plain).picks[0].keep == LEGAL
    assert rule_for("frobnicate", plain).picks[0].statuses == EVERY_STATUS
    assert rule_for("unfrobnicate", negative).picks[0].keep == FORBIDDEN
    params = {p.name: p for p in drawn_params(plain, sizes, (0, 1))}
    assert set(params) == {"n", "row"}
    assert (params["n"].values[0], params["n"].values[-1]) == (1, 32)
    assert (params["row"].values[0], params["row"].values[-1]) == (1, 4)


def test_distinct_transitions_keep_growing() -> None:
    short, long = Walker(RADIX, 5).run(steps=300), Walker(RADIX, 5).run(steps=3_000)
    # The short run's last walk is cut off and drained where the long one walks on: only its drain can differ.
    walked = {t for t in short.coverage.transitions if t[1] != "drain"}
    assert walked <= set(long.coverage.transitions)
    assert long.coverage.distinct > short.coverage.distinct
    counts = [sample.transitions for sample in long.samples]
    assert counts == sorted(counts) and counts[-1] == long.coverage.distinct


def test_the_walk_loads_no_hypothesis() -> None:
    # The pool shapes live beside the profiles, which load Hypothesis: the probe spells its config out.
    probe = (
        "import sys; from fuzz.walker.walk import Walker; from fuzz.walker.shrink import shrink\n"
        "config = {'target': 'reference', 'device': 'cpu', 'rows': 4, 'tokens': 64, 'width': 32, 'page_size': 1,"
        " 'cache': 'chunk', 'speculative': False, 'faults': ['legacy_reuse_guard']}\n"
        "r = Walker(config, 0).run(steps=500); shrink(config, r.trace.steps, r.failure, 5.0)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'hypothesis'], 'hypothesis was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_the_cli_answers_with_the_fuzz_run_statuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "ce")
    assert walker_main(["run", "--pool", "chunk-p1", "--seed", "1", "--steps", "200", "--out", out]) == 0
    faulted = ["run", "--pool", "chunk-p1", "--seed", "0", "--steps", "2000", "--fault", "legacy_reuse_guard"]
    assert walker_main([*faulted, "--out", out]) == 1
    assert "written to" in capsys.readouterr().out
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert walker_main(["run", "--pool", "chunk-p1", "--steps", "10", "--out", str(blocker)]) == 2
    assert walker_main(["run", "--pool", "chunk-p1", "--exclude", "no_such_op", "--out", out]) == 2
    with pytest.raises(SystemExit) as bad:
        walker_main(["run", "--steps", "10", "--budget", "5s"])
    assert bad.value.code == 2


def test_nothing_the_scheduler_does_is_drawn_while_a_free_group_is_open(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn_in_group: set[str] = set()
    original = Lockstep.step

    def step(lock: Lockstep, op: str, args: dict[str, int]) -> Failure | None:
        if lock.model.state.group_open:
            drawn_in_group.add(op)
        return original(lock, op, args)

    monkeypatch.setattr(Lockstep, "step", step)
    for seed in range(6):
        assert Walker(RADIX, seed).run(steps=400).failure is None
    assert "group_begin" in drawn_in_group  # a nested begin, the refusal the contract owes
    # The drain (no rule: it ends every walk) closes the group before it releases anything.
    assert not {op for op in drawn_in_group - {"drain"} if RULES[op].schedules}, drawn_in_group


def test_a_swarm_that_begins_a_group_can_end_it() -> None:
    for seed in range(40):
        weights = Walker(RADIX, seed).swarm.weights
        assert not weights["group_begin"] or weights["group_end"], (seed, weights)
