"""The lockstep Hypothesis state machine: rules draw lifecycle steps, `Lockstep` runs and judges them.

Requests are referred to by id; a rule draws among the ids the model knows in the right status, so that
shrinking keeps every step meaningful. Negative rules make calls the contract forbids on released records
and expect the pool to refuse them unchanged.

Why not Hypothesis bundles with `consumes`: no step ends a record. A finished, aborted or PP-released request
keeps its record, and that stale record is exactly what the hunt needs next (`reuse_released`,
`release_again`, re-admission, `offload_release` with the `-1` sentinel); consuming it would take it out of
reach. And every rule wants the requests in given statuses, which change at each step: a bundle can only be
filtered after the draw (rejections that grow with the pool), where an index into the model's list of ids
in that status never misses and shrinks towards the first such request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from fuzz.drain import DRAIN, drain_args, drains
from fuzz.fault_plans import HARNESS_STEPS, barred, installed_points, plan_args, planned
from fuzz.lockstep import Lockstep, StepFailed
from fuzz.targets import target_ops
from fuzz.unchecked import unchecked
from model.actions import manual_release_preconditions
from model.interp import PY
from model.trace import Failure
from properties.vocabulary import (
    FAULT_POINTS,
    FINISH_BY,
    KIND_EXCLUSIONS,
    KIND_NORMAL,
    KIND_SKIP_INSERT,
    MAX_BATCH,
    MAX_FAULT_CALL,
    STATUS_DECODE,
    STATUS_DONE,
    STATUS_PREFILL,
    STATUS_WAITING,
)

PREFILL = frozenset({STATUS_PREFILL})
DECODING = frozenset({STATUS_DECODE})
LIVE = PREFILL | DECODING
RELEASED = frozenset({STATUS_DONE})
READMITTABLE = frozenset({STATUS_DONE, STATUS_WAITING})
WAITING = frozenset({STATUS_WAITING})
FAMILIES = 2  # two token streams: enough for shared and unshared prefixes
PICK = st.integers(0, 15)  # which of the requests in the right status a step acts on
FINISH_KINDS = st.integers(0, len(FINISH_BY) - 1)  # what a finishing step's check matches
# Mostly normal requests; one in four is barred from the tree (it shrinks towards normal).
KIND_DRAWS = (KIND_NORMAL, KIND_NORMAL, KIND_NORMAL, KIND_SKIP_INSERT)

# Named rule groups (`--swarm`): beyond Hypothesis's own random rule subsets, each leaves out whole flows so the
# rest are exercised harder. None is every rule.
SWARMS: dict[str, frozenset[str] | None] = {
    "all": None,
    "chunked-heavy": frozenset(
        {
            "admit",
            "batch",
            "extend",
            "readmit",
            "release",
            "differential",
            "reuse_released",
            "release_released",
            "flush",
        }
    ),
    "abort-heavy": frozenset(
        {
            "admit",
            "extend",
            "decode",
            "release",
            "abort_waiting",
            "readmit",
            "differential",
            "preempt_finished",
            "offload_release",
            "group_begin",
            "group_end",
        }
    ),
    "exhaustion": frozenset(
        {
            "admit",
            "batch",
            "unchecked_batch",
            "pd_prealloc",
            "extend",
            "decode",
            "spec_prepare",
            "evict",
            "release",
            "offload_release",
        }
    ),
    "speculative": frozenset(
        {
            "admit",
            "pd_prealloc",
            "decode",
            "spec_prepare",
            "spec_commit",
            "release",
            "pp_release_manual",
            "differential",
        }
    ),
    "radix-sharing": frozenset(
        {"admit", "batch", "extend", "readmit", "evict", "release", "flush", "differential", "pp_release_manual"}
    ),
}


@dataclass
class Recorder:
    """What the runner needs after Hypothesis returns: the last run's lockstep, and what was run."""

    config: dict[str, Any]
    swarm: str = "all"
    driver: Callable[[dict[str, Any]], Any] = Lockstep  # the model alone, for benchmarks
    exclude: frozenset[str] = frozenset()  # ops never drawn (a known finding's, so that it cannot mask others)
    # Called with the lockstep and the failure the moment a step fails, before Hypothesis shrinks (campaigns write
    # the unshrunk trace there, so that a killed run keeps it).
    on_failure: Callable[[Any, Failure], None] | None = None
    last: Lockstep | None = None
    total_steps: int = 0
    cases: int = 0
    ops: dict[str, int] = field(default_factory=dict)
    corners: dict[str, int] = field(default_factory=dict)


def build_machine(recorder: Recorder) -> type[RuleBasedStateMachine]:
    """A state machine class bound to `recorder` (Hypothesis instantiates it once per test case)."""
    width = recorder.config["width"]
    lengths = st.integers(min_value=1, max_value=width)
    # A request kind the run does not draw (`kind:NAME` in the exclusions) leaves normal requests in its place.
    kinds = st.sampled_from([k for k in KIND_DRAWS if not any(KIND_EXCLUSIONS.get(x) == k for x in recorder.exclude)])
    # A batch entry: what it is (0 a new admission, 1 the next chunk, 2 a re-admission, 3 a decode), which request
    # of that status, its extend length, and a new admission's prompt, family and kind.
    entry = st.tuples(st.integers(0, 3), PICK, lengths, lengths, st.integers(0, FAMILIES - 1), kinds)
    batch_entries = st.lists(entry, min_size=1, max_size=MAX_BATCH)
    radix = recorder.config.get("cache") == "radix"
    speculative = bool(recorder.config.get("speculative"))
    rules = SWARMS[recorder.swarm]
    # Only ops the target implements are drawn: a rule whose op it lacks never runs, a release draws its paths.
    ops = target_ops(recorder.config) - recorder.exclude
    drained = drains(ops, recorder.exclude)
    releases = [path for path in ("finish", "pp_release", "retract", "abort") if path in ops]
    negatives = [op for op in ("release_again", "free_row") if op in ops]

    # The fault points a plan may name: those of the target's pools, where the config asks for plans at all.
    installed = installed_points(recorder.config) if recorder.config.get("fault_rate", 0) > 0 else set()
    planned_points = [p for p in FAULT_POINTS if p in installed]

    def in_swarm(rule_name: str) -> bool:
        return rules is None or rule_name in rules

    def allowed(rule_name: str, op: str | None = None) -> bool:
        """The swarm keeps the rule and the target implements its op (the rule's own name unless given)."""
        return in_swarm(rule_name) and (op or rule_name) in ops

    class LifecycleMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.lock = recorder.driver(recorder.config)
            self.next_rid = 0
            self.failed = False
            self.most_rows_held = 0
            self.most_slots_held = 0
            self.profiled = False
            self.plan: dict[str, int] | None = None  # the fault plan `arm_fault` set for the next step
            self._status_key = -1
            self._status_of: dict[int, Any] = {}
            recorder.last = self.lock
            recorder.cases += 1

        def _do(self, op: str, args: dict[str, int]) -> None:
            plan = self.plan
            if plan is not None and op not in HARNESS_STEPS and not barred(planned(plan), op, recorder.exclude, args):
                args, self.plan = {**args, **plan}, None
            recorder.total_steps += 1
            recorder.ops[op] = recorder.ops.get(op, 0) + 1
            failure = self.lock.step(op, args)
            for corner in self.lock.corners:
                recorder.corners[corner] = recorder.corners.get(corner, 0) + 1
                event(corner)
            if failure is not None:
                self.failed = True
                if recorder.on_failure is not None:
                    recorder.on_failure(self.lock, failure)
                raise StepFailed(failure)
            self.most_rows_held = max(self.most_rows_held, self.lock.config["rows"] - len(self.lock.snap.free_rows))
            self.most_slots_held = max(
                self.most_slots_held, self.lock.config["tokens"] - self.lock.model.state.n_free_slots
            )

        def teardown(self) -> None:
            # Every case that passed ends with a drain (`fuzz.drain`), unless the run excludes it.
            if not self.failed and drained:
                self._do(DRAIN, drain_args(recorder.exclude))
            # Steer towards crowded pools, where rows, slots and tree pages run out and get shared.
            target(float(self.most_rows_held), label="most rows held at once")
            target(float(self.most_slots_held), label="most slots out of the free list at once")

        def _ids(self, statuses: frozenset[int]) -> list[int]:
            # Hypothesis asks every rule's precondition before each step: the request ids by status are read
            # from the model once per step (any step appends to the trace), not once per question.
            key = len(self.lock.steps)
            if self._status_key != key:
                s = self.lock.model.state
                self._status_of = {r: s.rec_status.get(r) for r in self.lock.model.known_requests()}
                self._status_key = key
            return [r for r, status in self._status_of.items() if status in statuses]

        def _pick(self, index: int, statuses: frozenset[int]) -> int:
            # An index into the matching ids (not a `data()` draw): cheaper, and it shrinks towards the oldest.
            ids = self._ids(statuses)
            return ids[index % len(ids)]

        def _reserved(self) -> list[int]:
            """The decoding requests holding draft slots past what they committed (`C < A`)."""
            state = self.lock.model.state
            return [r for r in self._ids(DECODING) if state.rec_A.get(r) > state.rec_C.get(r)]

        def _new_rid(self) -> int:
            self.next_rid += 1
            return self.next_rid - 1

        def out_of_group(self) -> bool:
            # While a result pass's free group is open the scheduler only releases (and stashes, which its
            # batch steps do inside their own pass); it schedules nothing new until the group ends.
            return self.lock.model.state.group_open == 0

        def has_prefill(self) -> bool:
            return bool(self._ids(PREFILL))

        def has_decoding(self) -> bool:
            return bool(self._ids(DECODING))

        def has_live(self) -> bool:
            return bool(self._ids(LIVE))

        def has_released(self) -> bool:
            return bool(self._ids(RELEASED))

        def has_readmittable(self) -> bool:
            return bool(self._ids(READMITTABLE))

        @precondition(lambda self: allowed("admit") and self.out_of_group())
        @rule(prompt=lengths, n=lengths, family=st.integers(0, FAMILIES - 1), kind=kinds)
        def admit(self, prompt: int, n: int, family: int, kind: int) -> None:
            self._do("admit", {"req": self._new_rid(), "prompt": prompt, "n": n, "family": family, "kind": kind})

        @precondition(lambda self: allowed("batch") and self.out_of_group())
        @rule(drawn=batch_entries)
        def batch(self, drawn: list[tuple[int, int, int, int, int, int]]) -> None:
            args = self._batch_args(drawn)
            if args is not None:
                self._do("batch", args)

        def _batch_args(self, drawn: list[tuple[int, int, int, int, int, int]]) -> dict[str, int] | None:
            """The drawn entries that can be filled, each a different request: a new admission, the next chunk of
            one in prefill, a re-admission, or a decode (a mixed batch when prefill and decode meet)."""
            args: dict[str, int] = {}
            used: set[int] = set()
            for kind_of_entry, pick, n, prompt, family, kind in drawn:
                if kind_of_entry == 0:
                    entry = {"op": 0, "req": self._new_rid(), "n": n, "prompt": prompt, "family": family, "kind": kind}
                else:
                    statuses = (PREFILL, READMITTABLE, DECODING)[kind_of_entry - 1]
                    ids = [r for r in self._ids(statuses) if r not in used]
                    if not ids:
                        continue
                    op = 2 if kind_of_entry == 3 else 1
                    entry = {"op": op, "req": ids[pick % len(ids)], "n": n}
                slot = len(used)
                used.add(entry["req"])
                args.update({f"{name}{slot}": value for name, value in entry.items()})
            return {"size": len(used), **args} if used else None

        @precondition(lambda self: allowed("unchecked_batch", "batch") and self.out_of_group())
        @rule(drawn=batch_entries)
        def unchecked_batch(self, drawn: list[tuple[int, int, int, int, int, int]]) -> None:
            """A batch the scheduler's budget does not screen: the allocation paths must refuse it if it does not
            fit. Drawn only where a shortfall fails the batch's first allocation (`fuzz.unchecked`)."""
            args = self._batch_args(drawn)
            sent = unchecked(self.lock, args) if args is not None else None
            if sent is not None:
                self._do("batch", sent)

        @precondition(lambda self: allowed("pd_prealloc") and self.out_of_group())
        @rule(fill=lengths)
        def pd_prealloc(self, fill: int) -> None:
            self._do("pd_prealloc", {"req": self._new_rid(), "fill": fill})

        @precondition(lambda self: allowed("extend") and self.out_of_group() and self.has_prefill())
        @rule(i=PICK, n=lengths)
        def extend(self, i: int, n: int) -> None:
            self._do("extend", {"req": self._pick(i, PREFILL), "n": n})

        @precondition(lambda self: allowed("readmit", "extend") and self.out_of_group() and self.has_readmittable())
        @rule(i=PICK, n=lengths)
        def readmit(self, i: int, n: int) -> None:
            self._do("extend", {"req": self._pick(i, READMITTABLE), "n": n})

        @precondition(lambda self: allowed("decode") and self.out_of_group() and self.has_decoding())
        @rule(i=PICK)
        def decode(self, i: int) -> None:
            self._do("decode", {"req": self._pick(i, DECODING)})

        @precondition(
            lambda self: allowed("spec_prepare") and speculative and self.out_of_group() and self.has_decoding()
        )
        @rule(i=PICK, reserve=st.integers(1, 8))
        def spec_prepare(self, i: int, reserve: int) -> None:
            self._do("spec_prepare", {"req": self._pick(i, DECODING), "reserve": reserve})

        @precondition(lambda self: allowed("spec_commit") and speculative and self.has_decoding())
        @rule(i=PICK, accepted=st.integers(1, 8))
        def spec_commit(self, i: int, accepted: int) -> None:
            self._do("spec_commit", {"req": self._pick(i, DECODING), "accepted": accepted})

        @precondition(lambda self: allowed("release", "decode_finish") and self.out_of_group() and self.has_decoding())
        @rule(i=PICK, by=FINISH_KINDS)
        def decode_finish(self, i: int, by: int) -> None:
            self._do("decode_finish", {"req": self._pick(i, DECODING), "by": by})

        @precondition(lambda self: allowed("release", "spec_finish") and speculative and bool(self._reserved()))
        @rule(i=PICK, accepted=st.integers(1, 8), stop=st.integers(0, 7), by=FINISH_KINDS)
        def spec_finish(self, i: int, accepted: int, stop: int, by: int) -> None:
            # A request with a reserve, a run that fits it (a longer one is spec_commit's refusal to draw), the stop
            # anywhere in it: inside it trims what the release keeps, at its end it does not.
            state, reserved = self.lock.model.state, self._reserved()
            rid = reserved[i % len(reserved)]
            accepted = (accepted - 1) % (state.rec_A.get(rid) - state.rec_C.get(rid)) + 1
            args = {"accepted": accepted, "stop": stop % accepted + 1, "by": by}
            self._do("spec_finish", {"req": rid, **args})

        @precondition(lambda self: in_swarm("release") and bool(releases) and self.has_live())
        @rule(i=PICK, path=st.sampled_from(releases or ["finish"]))
        def release(self, i: int, path: str) -> None:
            self._do(path, {"req": self._pick(i, LIVE)})

        # At server start, as a server runs it: an always-enabled rule without a request would crowd out the rest.
        @precondition(
            lambda self: allowed("pp_profile") and self.out_of_group() and not self.has_live() and not self.profiled
        )
        @rule(quarter=st.integers(1, 8))
        def pp_profile(self, quarter: int) -> None:
            self.profiled = True  # once a case: a server profiles once, and 0.5.18's 128 requests are costly
            self._do("pp_profile", {"quarter": quarter})

        @precondition(lambda self: allowed("pp_release_manual") and self.has_live())
        @rule(i=PICK)
        def pp_release_manual(self, i: int) -> None:
            # The hand-written release is only ever called under PR #37167's preconditions.
            m = self.lock.model
            ok = [r for r in self._ids(LIVE) if all(manual_release_preconditions(PY, m.sizes, m.state, r))]
            if ok:
                self._do("pp_release_manual", {"req": ok[i % len(ok)]})

        @precondition(lambda self: allowed("offload_release") and (self.has_decoding() or self.has_released()))
        @rule(i=PICK, sentinel=st.sampled_from([0, 1]))
        def offload_release(self, i: int, sentinel: int) -> None:
            # The offload manager releases PD-decode requests, which protect no prefix; a released record may
            # carry the -1 sentinel in place of None, and the release must return early on it.
            s = self.lock.model.state
            ok = [r for r in self._ids(DECODING) if s.rec_P.get(r) == 0] if not sentinel else []
            ok += self._ids(RELEASED)
            if ok:
                self._do("offload_release", {"req": ok[i % len(ok)], "sentinel": sentinel})

        # The scheduler retracts when the next decode does not fit its running batch (every decoding request).
        @precondition(lambda self: allowed("retract_decode") and self.out_of_group() and self.has_decoding())
        @rule()
        def retract_decode(self) -> None:
            self._do("retract_decode", {})

        # A weight update's retract-mode pause: every running request and the chunked one retracted, re-queued.
        @precondition(lambda self: allowed("pause_retract") and self.has_live())
        @rule()
        def pause_retract(self) -> None:
            self._do("pause_retract", {})

        # The scheduler's decode round: the running batch decodes one token, retracting first where it does not fit.
        @precondition(lambda self: allowed("decode_round") and self.out_of_group() and self.has_decoding())
        @rule()
        def decode_round(self) -> None:
            self._do("decode_round", {})

        @precondition(lambda self: allowed("differential") and self.has_live())
        @rule(i=PICK)
        def differential(self, i: int) -> None:
            self._do("differential", {"req": self._pick(i, LIVE)})

        @precondition(lambda self: allowed("abort_waiting", "abort") and bool(self._ids(WAITING)))
        @rule(i=PICK)
        def abort_waiting(self, i: int) -> None:
            self._do("abort", {"req": self._pick(i, WAITING)})

        @precondition(lambda self: allowed("evict") and radix)
        @rule(n=lengths)
        def evict(self, n: int) -> None:
            self._do("evict", {"n": n})

        # A result pass that frees several requests at once: begin a group, release inside it (any release rule),
        # end it. A begin inside an open group is drawn too: the contract forbids it (it would drop the pending
        # frees). An end is drawn only with a group open, as the scheduler calls it (without one it is a no-op by
        # contract; the component lockstep checks that).
        @precondition(lambda self: allowed("group_begin"))
        @rule()
        def group_begin(self) -> None:
            self._do("group_begin", {})

        @precondition(lambda self: allowed("group_end") and not self.out_of_group())
        @rule()
        def group_end(self) -> None:
            self._do("group_end", {})

        # Flushing is for an idle pool: drawn only once no request holds a row (waiting ones make it a refusal). The
        # walker draws it on busy pools too, under its swarm weights; here an always-enabled rule without arguments
        # took 322 of 1042 steps of a derandomized run and crowded out finishes.
        @precondition(lambda self: allowed("flush") and self.out_of_group() and self.lock.model.state.n_held_rows == 0)
        @rule()
        def flush(self) -> None:
            self._do("flush", {})

        @precondition(lambda self: allowed("reuse_released") and self.out_of_group() and self.has_released())
        @rule(i=PICK, n=lengths)
        def reuse_released(self, i: int, n: int) -> None:
            rid = self._pick(i, RELEASED)
            self._do("reuse_released", {"req": rid, "row": self.lock.last_row.get(rid, 0), "n": n})

        @precondition(lambda self: allowed("preempt_finished", "retract") and self.has_released())
        @rule(i=PICK)
        def preempt_finished(self, i: int) -> None:
            # Priority preemption walks the running batch, which still lists requests that finished this round.
            self._do("retract", {"req": self._pick(i, RELEASED)})

        # A fault plan for the next step (`fuzz.fault_plans`): only where the config asks for plans, so Hypothesis
        # chooses where in a run a call fails, and shrinks a plan away like any other step.
        @precondition(lambda self: bool(planned_points) and self.plan is None)
        @rule(point=st.sampled_from(planned_points or ["row_alloc"]), call=st.integers(0, MAX_FAULT_CALL))
        def arm_fault(self, point: str, call: int) -> None:
            self.plan = plan_args(point, call)

        @precondition(lambda self: in_swarm("release_released") and bool(negatives) and self.has_released())
        @rule(i=PICK, op=st.sampled_from(negatives or ["release_again"]))
        def release_released(self, i: int, op: str) -> None:
            self._do(op, {"req": self._pick(i, RELEASED)})

        # A request arrives and waits in the queue; the scheduler's prefill round (its adder) admits it.
        @precondition(lambda self: allowed("queue"))
        @rule(prompt=lengths, family=st.integers(0, FAMILIES - 1), kind=kinds, priority=st.integers(0, 2))
        def queue(self, prompt: int, family: int, kind: int, priority: int) -> None:
            args = {"req": self._new_rid(), "prompt": prompt, "family": family, "kind": kind, "priority": priority}
            self._do("queue", args)

        # The scheduler's prefill round: the chunked request continues, waiting ones are admitted as budgets allow.
        @precondition(lambda self: allowed("prefill_round") and self.out_of_group() and self.round_ready())
        @rule()
        def prefill_round(self) -> None:
            self._do("prefill_round", {})

        def round_ready(self) -> bool:
            # Only where the model calls the round legal: the chunked request's rest must fit (model.prefill_round).
            return self.lock.model.enabled("prefill_round", {})

    return LifecycleMachine
