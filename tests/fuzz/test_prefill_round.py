"""The prefill round: a request waits in the queue (`queue`) until the scheduler's round admits it; the model
follows the pool's choice and holds it to the rules the scheduler keeps whatever its budgets say."""

from __future__ import annotations

from fuzz.lockstep import Lockstep
from fuzz.profiles import POOLS
from model.concrete import Model
from model.state import Sizes
from properties.vocabulary import BATCH_OPS, STATUS_DECODE, STATUS_DONE, STATUS_PREFILL, STATUS_WAITING

CHUNK = {**POOLS["chunk-p1"], "faults": []}
RADIX = {**POOLS["radix-p1"], "faults": []}  # a round needs a tree that evicts on demand
EXTEND = BATCH_OPS.index("extend")


def _queued(*prompts: int) -> Model:
    model = Model(Sizes(rows=4, tokens=64, width=32))
    for rid, prompt in enumerate(prompts):
        model.step("queue", {"req": rid, "prompt": prompt, "family": 0, "kind": 0})
    return model


def _round(*entries: tuple[int, int, int]) -> dict[str, int]:
    """A round's choice: (request, tokens computed, row) per entry, nothing matched."""
    args = {"size": len(entries)}
    for i, (rid, n, row) in enumerate(entries):
        args.update({f"op{i}": EXTEND, f"req{i}": rid, f"n{i}": n, f"prefix{i}": 0, f"row{i}": row})
    return args


def test_a_queued_request_waits_holding_nothing() -> None:
    model = _queued(20)
    assert model.state.rec_status.get(0) == STATUS_WAITING
    assert (model.state.rec_row.get(0), model.state.rec_C.get(0), model.state.n_active) == (0, 0, 1)
    assert not model.enabled("queue", {"req": 0, "prompt": 4, "family": 0, "kind": 0})  # known already


def test_the_model_follows_the_round_and_holds_it_to_the_schedulers_rules() -> None:
    model = _queued(20, 6)
    assert model.enabled("prefill_round", {})
    assert model.choice_ok("prefill_round", {"size": 0})  # the adder may admit nothing
    model.step("prefill_round", _round((0, 16, 4)))
    assert model.state.rec_status.get(0) == STATUS_PREFILL
    assert not model.choice_ok("prefill_round", {"size": 0}), "the chunked request always runs"
    assert not model.choice_ok("prefill_round", _round((1, 6, 3))), "the chunked request left out"
    model.step("prefill_round", _round((0, 4, 4), (1, 6, 3)))
    assert [model.state.rec_status.get(r) for r in (0, 1)] == [STATUS_DECODE, STATUS_DECODE]
    assert not model.choice_ok("prefill_round", _round((0, 1, 4))), "a decoding request prefilled"


def test_a_round_may_leave_one_request_mid_prefill_not_two() -> None:
    model = _queued(20, 20)
    assert not model.choice_ok("prefill_round", _round((0, 8, 4), (1, 8, 3)))
    assert model.choice_ok("prefill_round", _round((0, 20, 4), (1, 8, 3)))


def test_a_round_whose_chunked_rest_may_not_fit_is_not_drawn() -> None:
    model = Model(Sizes(rows=4, tokens=24, width=32))
    model.step("queue", {"req": 0, "prompt": 30, "family": 0, "kind": 0})
    model.step("prefill_round", _round((0, 16, 4)))
    assert not model.enabled("prefill_round", {}), "its 14 tokens left do not fit the 8 free slots"


def _walk(config: dict[str, object]) -> Lockstep:
    lock = Lockstep(config)
    for rid, prompt in enumerate((20, 20, 6)):
        assert lock.step("queue", {"req": rid, "prompt": prompt, "family": rid % 2, "kind": 0}) is None
    for _ in range(3):
        assert lock.step("prefill_round", {}) is None
    return lock


def test_the_reference_adder_runs_the_chunked_request_first_and_chunks_one() -> None:
    lock = _walk(CHUNK)
    sizes = [lock.steps[i].choice["size"] for i in (3, 4, 5)]
    first = lock.steps[3].choice
    assert (first["req0"], first["n0"]) == (0, 16)  # half a row: the round's chunk budget
    second = lock.steps[4].choice
    assert (second["req0"], second["n0"]) == (0, 4)  # the chunked request's rest, first
    assert sizes[0] == 1 and sizes[1] >= 2
    statuses = [lock.model.state.rec_status.get(r) for r in range(3)]
    assert statuses.count(STATUS_PREFILL) <= 1 and STATUS_DECODE in statuses


def test_a_drain_ends_queued_requests_and_the_pool_is_back_to_full() -> None:
    for config in (CHUNK, RADIX):
        lock = Lockstep(config)
        assert lock.step("queue", {"req": 0, "prompt": 9, "family": 0, "kind": 0}) is None
        assert lock.step("prefill_round", {}) is None
        assert lock.step("queue", {"req": 1, "prompt": 5, "family": 1, "kind": 0}) is None
        assert lock.step("drain", {}) is None
        assert {lock.model.state.rec_status.get(r) for r in (0, 1)} == {STATUS_DONE}


def test_a_round_may_preempt_decoding_requests_only() -> None:
    model = _queued(4, 4)
    model.step("prefill_round", _round((0, 4, 4), (1, 4, 3)))
    model.step("queue", {"req": 2, "prompt": 4, "family": 0, "kind": 0, "priority": 2})
    preempt = {**_round((2, 4, 4)), "preempted": 1, "pre0": 0}
    assert model.choice_ok("prefill_round", preempt)
    assert not model.choice_ok("prefill_round", {**preempt, "pre0": 2}), "a waiting request preempted"
    assert not model.choice_ok("prefill_round", {**_round((0, 1, 4)), "preempted": 1, "pre0": 0}), "it runs too"
    model.step("finish", {"req": 1})
    assert not model.choice_ok("prefill_round", {**preempt, "pre0": 1}), "a finished request released again"
    model.step("prefill_round", preempt)
    assert [model.state.rec_status.get(r) for r in (0, 2)] == [STATUS_WAITING, STATUS_DECODE]


def test_the_pd_decode_side_runs_no_prefill_round() -> None:
    """A PD decode server admits through its pre-allocation queue: no arrivals in a waiting queue, no adder."""
    from fuzz.targets import target_ops

    assert {"queue", "prefill_round"} <= target_ops(CHUNK)
    assert not {"queue", "prefill_round", "pp_profile"} & target_ops({**POOLS["pd-p1"], "faults": []})
