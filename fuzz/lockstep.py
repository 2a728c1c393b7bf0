"""The lockstep driver: one step runs on the model and on a real pool, and the two are compared.

The model judges every call before it is made (legal or forbidden) and every choice the pool makes (which
row it handed out, how much of an inserted key the tree already held, how much an eviction freed); after
the step, the pool's observation must equal the model's, and every invariant must hold on the pool's own
tensors. The driver does not need Hypothesis: the fuzzer and replay share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fuzz.drain import DRAIN, drain
from fuzz.retraction import OriginLedger, retracted_choice
from fuzz.rounds import round_choice, round_corners
from fuzz.targets import DIFFERENTIAL, make_target, model_sizes, target_ops
from impl.fault_points import Shot, plan_of
from impl.target import OFFLOAD_FROM_PROTECTED, OFFLOAD_FROM_ZERO, Cause, PoolSnapshot, Refused, Target
from model.actions import MANUAL_PRECONDITIONS, manual_release_preconditions
from model.concrete import Model
from model.decode_round import DECODE_ROUND
from model.interp import PY
from model.pause_retract import PAUSE_RETRACT
from model.prefill_round import PREFILL_ROUND
from model.retract_decode import RETRACT_DECODE
from model.trace import Failure, Step
from properties.abstraction import Observation, observe
from properties.check import check_snapshot
from properties.eviction import check_evictions
from properties.generations import GenerationLedger
from properties.vocabulary import BATCH_OPS, FINISH_BY, KIND_SKIP_INSERT, MAX_BATCH, STATUS_DECODE
from properties.vocabulary import LIVE_STATUSES as LIVE

Call = Callable[[Target, dict[str, int]], Any]

# How each op reaches the target.
_CALLS: dict[str, Call] = {
    "admit": lambda t, a: t.admit(a["req"], a["n"], prompt_len=a["prompt"], family=a["family"], kind=a.get("kind", 0)),
    "extend": lambda t, a: t.extend(a["req"], a["n"]),
    "decode": lambda t, a: t.decode(a["req"]),
    "batch": lambda t, a: t.batch(batch_entries(a), unchecked=bool(a.get("unchecked", 0))),
    "spec_prepare": lambda t, a: t.spec_prepare(a["req"], a["reserve"]),
    "spec_commit": lambda t, a: t.spec_commit(a["req"], a["accepted"]),
    "finish": lambda t, a: t.finish(a["req"]),
    "decode_finish": lambda t, a: t.decode_finish(a["req"], a["by"]),
    "spec_finish": lambda t, a: t.spec_finish(a["req"], a["accepted"], a["stop"], a["by"]),
    "pp_release": lambda t, a: t.pp_release(a["req"]),
    "pp_release_manual": lambda t, a: t.pp_release_manual(a["req"]),
    "pp_profile": lambda t, a: t.pp_profile(a["quarter"]),
    "retract": lambda t, a: t.retract(a["req"]),
    "retract_decode": lambda t, a: t.retract_decode(),
    "decode_round": lambda t, a: t.decode_round(),
    "pause_retract": lambda t, a: t.pause_retract(),
    "queue": lambda t, a: t.queue(
        a["req"], a["prompt"], family=a["family"], kind=a.get("kind", 0), priority=a.get("priority", 0)
    ),
    PREFILL_ROUND: lambda t, a: t.prefill_round(),
    "abort": lambda t, a: t.abort(a["req"]),
    "evict": lambda t, a: t.evict(a["n"]),
    "flush": lambda t, a: t.flush(),
    "group_begin": lambda t, a: t.group_begin(),
    "group_end": lambda t, a: t.group_end(),
    "pd_prealloc": lambda t, a: t.pd_prealloc(a["req"], a["fill"]),
    "offload_release": lambda t, a: t.offload_release(a["req"], a["sentinel"]),
    "reuse_released": lambda t, a: t.reuse_released(a["req"], a["row"], a["n"]),
    "release_again": lambda t, a: t.release_again(a["req"]),
    "free_row": lambda t, a: t.free_row(a["req"]),
}
# The steps whose choice is a decode retraction's picks (`fuzz.retraction`).
RETRACTING = frozenset({RETRACT_DECODE, DECODE_ROUND})
# The steps that retract several requests, whose evictions may take what each retraction unlocks.
UNLOCKING = RETRACTING | {PAUSE_RETRACT}
HARNESS_OPS = frozenset({DIFFERENTIAL, DRAIN})  # the harness's own steps, which call no single pool method
OPS = frozenset(_CALLS) | HARNESS_OPS
# What each batch entry's op passes to the target.
_ENTRY_FIELDS = {"admit": ("req", "n", "prompt", "family", "kind"), "extend": ("req", "n"), "decode": ("req",)}


def batch_entries(a: dict[str, int]) -> list[tuple[str, dict[str, int]]]:
    """A batch step's entries as the target takes them, in slot order. An unknown op code or a size out of range
    is passed on as it is (one entry past `MAX_BATCH` at most), for the target to refuse."""
    found = []
    for i in range(min(a["size"], MAX_BATCH + 1)):
        code = a.get(f"op{i}", 0)
        op = BATCH_OPS[code] if 0 <= code < len(BATCH_OPS) else f"op code {code}"
        found.append((op, {f: a.get(f"{f}{i}", 0) for f in _ENTRY_FIELDS.get(op, ("req",))}))
    return found


# Calls the scheduler makes on whatever its batches still list, filtering by status before the pool sees them
# (preemption skips requests that finished this round, #18694): the filter must refuse them, not a pool assert.
SCHEDULER_FILTERED = frozenset({"retract"})


@dataclass(frozen=True)
class ReleasePair:
    """Two release paths the differential runs from one state: `why` they must leave the same pool (a named
    theorem, or the same upstream code path); `failed` names the precondition that does not hold here, and then
    a difference is only reported."""

    first: str
    second: str
    why: str
    failed: str | None


class StepFailed(AssertionError):
    """A lockstep step found a failure; `failure` says which."""

    def __init__(self, failure: Failure):
        super().__init__(f"step {failure.step}: {failure.kind} {failure.id}: {failure.message}")
        self.failure = failure


def _tree_size(snap: PoolSnapshot) -> int:
    """The slots the tree's nodes hold (a recount: the counters may drift, which `tree-counters` reports)."""
    return int(snap.tree_slots.numel())


@dataclass
class Lockstep:
    """A model and a target stepped together; `steps` is the trace so far."""

    config: dict[str, Any]
    target: Target = field(init=False)
    ops: frozenset[str] = field(init=False)
    model: Model = field(init=False)
    snap: PoolSnapshot = field(init=False)
    fresh: PoolSnapshot = field(init=False)  # the pool as built, which a drain must bring it back to
    steps: list[Step] = field(default_factory=list)
    last_row: dict[int, int] = field(default_factory=dict)
    generations: GenerationLedger = field(default_factory=GenerationLedger)
    origins: OriginLedger = field(default_factory=OriginLedger)  # what a decode retraction's pick order reads
    corners: list[str] = field(default_factory=list)  # the lifecycle corners the last step reached
    # The observation of the last snapshot observed: a refusal compares the snapshot before it, which the step
    # before observed already (a snapshot is a copy, so its observation never changes).
    _seen: tuple[PoolSnapshot, Observation] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.target = make_target(self.config)
        self.ops = target_ops(self.config) | {DRAIN}
        self.model = Model(model_sizes(self.config))
        self.snap = self.fresh = self.target.snapshot()

    def step(self, op: str, inputs: dict[str, int]) -> Failure | None:
        """Run one step on both sides; the failure it shows, if any. The step is recorded either way."""
        if op not in self.ops:
            raise ValueError(f"the {self.config.get('target', 'reference')} target does not implement {op!r}")
        if op == DIFFERENTIAL:
            return self.differential(inputs["req"])
        if op == DRAIN:
            return drain(self, flush=inputs.get("flush", 1) == 1)
        return self.pool_step(op, inputs)

    def pool_step(self, op: str, inputs: dict[str, int]) -> Failure | None:
        """One contract op on both sides (what `step` runs for every op but the harness's own, and what a drain
        runs for each of its releases, uncounted by subclasses that count steps)."""
        index, before = len(self.steps), self.snap
        args = {**inputs, **self._observed(op, inputs)}
        legal = self.model.enabled(op, args)
        self.target.take_evictions()  # none is pending between steps; this makes sure
        with self.target.fault_points.armed(plan_of(args)) as shot:
            try:
                result = _CALLS[op](self.target, args)
            except Refused as exc:
                self.steps.append(Step(op, args))
                self.corners = refusal_corners(op, legal, exc.cause, args) + fault_corners(shot, "refused")
                if shot is not None and shot.fired and legal:
                    return self._failed_inside(index, op, args, exc, before, shot.plan.point)
                return self._refused(index, op, args, legal, exc, before)
            except Exception as exc:  # neither done nor refused: the pool crashed, a finding, not an abort
                self.steps.append(Step(op, args))
                self.corners = [f"{op}: crashed", *fault_corners(shot, "crashed")]
                return Failure(index, "crash", op, f"{_call(op, args)} raised {type(exc).__name__}: {exc}")
        self.snap = self.target.snapshot()
        evictions = [(e.asked, e.evicted) for e in self.target.take_evictions()]
        choice = self._choices(op, args, result, before, self.snap, evictions)
        self.steps.append(Step(op, args, choice))
        self.corners = step_corners(op, args, choice, before, self.snap) + fault_corners(shot, "absorbed")
        if not legal:
            return self._accepted_forbidden(index, op, args)
        if op == "evict":
            evictions.append((args["n"], int(result)))
        return (
            self._judge(index, op, {**args, **choice})
            or self._judge_evictions(index, before, evictions, unlocks_between=op in UNLOCKING)
            or self._observe(index)
        )

    def differential(self, rid: int) -> Failure | None:
        """Run every release path that applies to `rid` on clones of the pool and compare their post-states:
        where the model proves two paths equal they must match; elsewhere a difference is only reported."""
        index = len(self.steps)
        self.steps.append(Step(DIFFERENTIAL, {"req": rid}))
        self.corners = []
        results: dict[str, dict[str, Any] | str] = {}  # each path runs once, on its own clone

        def after(path: str) -> dict[str, Any] | str:
            if path not in results:
                results[path] = _run_path(self._clone(), path, rid)
            return results[path]

        for pair in self._release_pairs(rid):
            first, second = pair.first, pair.second
            diffs = _differences(after(first), after(second))
            if diffs and pair.failed is None:
                why = f"request {rid}: they must match here ({pair.why}), the pool differs: " + "; ".join(diffs)
                return Failure(index, "release-divergence", f"{first} vs {second}", why)
            if diffs:
                self.corners.append(f"differential: {first} vs {second} differ without `{pair.failed}`")
            else:
                self.corners.append(f"differential: {first} == {second}")
        return None

    def _clone(self) -> Target:
        """A copy of the target to run one release path on."""
        return self.target.clone()

    def _release_pairs(self, rid: int) -> list[ReleasePair]:
        """The pairs of release paths that apply to `rid`, each with why it must match and, where it need not
        here, the precondition that failed."""
        m, status = self.model, self.model.state.rec_status.get(rid)
        if status not in LIVE:
            return []
        held = manual_release_preconditions(PY, m.sizes, m.state, rid)
        failed = next((MANUAL_PRECONDITIONS[k] for k, ok in enumerate(held) if not ok), None)
        theorem = f"theorem release-equivalence@{'radix' if m.sizes.radix else 'chunk'}"
        evicts = "release_req evicts nothing on demand" if m.sizes.on_demand else None
        pairs = [
            ReleasePair("pp_release", "pp_release_manual", theorem, failed),
            ReleasePair("pp_release", "retract", "same code path: release_kv_cache(is_insert=False)", evicts),
        ]
        if status == STATUS_DECODE:
            why = "same code path: an abort while decoding finishes through release_kv_cache(is_insert=True)"
            pairs.append(ReleasePair("finish", "abort", why, None))
            pairs += self._offload_pair(rid)
        return [pair for pair in pairs if pair.first in self.ops and pair.second in self.ops]

    def _offload_pair(self, rid: int) -> list[ReleasePair]:
        """The decode-offload release beside `release_kv_cache(is_insert=False)` on a decoding record, held to it as
        far as the target's `offload_frees` says its release frees the same (none where it says None)."""
        frees = self.target.offload_frees
        if frees == OFFLOAD_FROM_PROTECTED:
            why = "the same frees: free_kv_row from cache_protected_len, the lock back, the row (sglang 0.5.21 on)"
            return [ReleasePair("pp_release", "offload_release", why, None)]
        if frees != OFFLOAD_FROM_ZERO:
            return []
        m = self.model
        theorem = f"theorem sentinel-boundary:release-equivalence@{'radix' if m.sizes.radix else 'chunk'}"
        protected = m.state.rec_P.get(rid) > 0
        return [ReleasePair("pp_release", "offload_release", theorem, "no protected prefix" if protected else None)]

    def _observed(self, op: str, inputs: dict[str, int]) -> dict[str, int]:
        """What the model reads off the target before the call (`model.actions.OBSERVED`): the prefix the tree
        holds for an admission (the record's own P when reused), and what an allocation could evict."""
        observed = {}
        if op in ("admit", "extend"):
            observed["prefix"] = self._prefix_of(op, inputs)
        elif op == "batch":
            for i, (entry_op, args) in enumerate(batch_entries(inputs)):
                if entry_op in ("admit", "extend"):
                    observed[f"prefix{i}"] = self._prefix_of(entry_op, args)
        if self.config.get("evict_on_demand") and "evictable" in dict(self.model.action(op).params):
            observed["evictable"] = self._evictable(op, inputs)
        return observed

    def _prefix_of(self, op: str, inputs: dict[str, int]) -> int:
        if op == "admit":
            return self.target.peek_prefix(inputs["family"], inputs["prompt"])
        record = self.snap.records.get(inputs["req"])
        if record is not None and record.row is not None:
            return record.protected_len
        return self.target.peek_prefix_of(inputs["req"], inputs["n"]) if record is not None else 0

    def _evictable(self, op: str, inputs: dict[str, int]) -> int:
        """What the call could evict on demand: after its own match's lock for an extend, else the whole
        evictable part of the tree (a retraction may evict what its own release unlocks)."""
        if op == "batch":
            return self.target.peek_batch_evictable(batch_entries(inputs))
        if op in UNLOCKING:  # a lower bound: what each retraction unlocks may be evicted too
            return self.snap.evictable_size
        if op == PREFILL_ROUND:  # a bound: its picks are unknown, and its preemptions unlock what they protect
            return self.snap.evictable_size + self.snap.protected_size
        rid = inputs["req"]
        if op == "admit":
            return self.target.peek_evictable(rid, inputs["n"], prompt_len=inputs["prompt"], family=inputs["family"])
        if op == "extend":
            return self.target.peek_evictable(rid, inputs["n"])
        if op == "retract":
            return self.snap.evictable_size + self.snap.protected_size
        return self.target.peek_evictable(rid)

    def _choices(
        self,
        op: str,
        args: dict[str, int],
        result: Any,
        before: PoolSnapshot,
        after: PoolSnapshot,
        evictions: list[tuple[int, int]],
    ) -> dict[str, int]:
        """What the pool chose, read from its answer, from what its tree gained and from what it evicted."""
        action = self.model.action(op)
        choice: dict[str, int] = {}
        evicted = sum(freed for _, freed in evictions)
        if op == PREFILL_ROUND:
            on_demand = evicted if self.config.get("evict_on_demand") else 0
            return {**round_choice(result, before, after, self.model.state.rec_kind, evicted), "evicted": on_demand}
        if op == "pp_profile":
            choice.update(_profiled_row(before, after))
        elif "row" in action.choice:
            choice["row"] = result
        if op == "batch":
            choice.update((f"row{i}", row) for i, row in enumerate(result))
        if op in RETRACTING:
            choice.update(retracted_choice(result))
        if "freed" in action.choice:
            choice["freed"] = result
        if "evicted" in action.choice and self.config.get("evict_on_demand"):
            choice["evicted"] = evicted
        if "dup" in action.choice:
            choice["dup"] = self._dup(op, args, before, after, evicted)
        return choice

    def _dup(self, op: str, args: dict[str, int], before: PoolSnapshot, after: PoolSnapshot, evicted: int) -> int:
        """Of the key the step inserted into the tree, the part the tree already held (what the step evicted
        first left the tree before the insert)."""
        if self.config.get("cache") != "radix":
            return 0
        gained = _tree_size(after) - _tree_size(before) + evicted
        page = self.config.get("page_size", 1)
        if op == "batch":  # only the total is observable: what each insert locked after it, less the growth
            return sum(after.records[rid].protected_len for rid in self._inserting(args)) - gained
        if op in ("admit", "extend"):
            return after.records[args["req"]].protected_len - gained
        key_len = before.records[args["req"]].committed_len + _stepped_past(op, args)
        return key_len // page * page - gained

    def _inserting(self, args: dict[str, int]) -> list[int]:
        """The batch's prefill entries whose stash inserts into the tree (not a skip-insert kind)."""
        kinds = self.model.state.rec_kind
        rids = []
        for op, entry in batch_entries(args):
            kind = entry.get("kind", 0) if op == "admit" else kinds.get(entry["req"])
            if op in ("admit", "extend") and kind != KIND_SKIP_INSERT:
                rids.append(entry["req"])
        return rids

    def _refused(
        self, index: int, op: str, args: dict[str, int], legal: bool, refusal: Refused, before: PoolSnapshot
    ) -> Failure | None:
        self.snap, reason = self.target.snapshot(), str(refusal)
        if legal:
            return Failure(index, "refused-legal", op, f"the pool refused {_call(op, args)}: {reason}")
        changes = self._observation(before).differences(self._observation(self.snap))
        if changes:
            return Failure(
                index,
                "refusal-changed-state",
                op,
                f"{_call(op, args)} was refused ({reason}) but changed " + "; ".join(changes),
            )
        if op in SCHEDULER_FILTERED and refusal.cause is Cause.CONTRACT_ASSERT:
            return Failure(
                index,
                "assert-tripped",
                op,
                f"{_call(op, args)} got past the scheduler's status filter "
                f"and was stopped only by the pool's own assert ({reason}); upstream that assert stops "
                "the scheduler",
            )
        return None

    def _failed_inside(
        self, index: int, op: str, args: dict[str, int], refusal: Refused, before: PoolSnapshot, point: str
    ) -> Failure | None:
        """A legal step that failed because its planned fault fired: the caller learnt of it (the refusal), and
        the contract of a failure is that it left every record, row, slot, lock and counter as before. Two
        changes a rollback may make are no difference: a row it took and gave back counted a tenure (its
        generation grew), and slots it gave back inside an open free group come back at the group's end."""
        self.snap = self.target.snapshot()
        seen = self._observation(self.snap)
        self.model.adopt_generations(seen.generations)
        self.model.adopt_group_frees(seen.free_slot_count, seen.pending_slot_count)
        expected = self.model.observe()
        changes = expected.differences(seen)
        if not changes:
            return None
        parts = "+".join(changed_parts(expected, seen))
        return Failure(
            index,
            "fault-not-rolled-back",
            f"{point}: {parts}",
            f"{_call(op, args)} failed at fault point {point} ({refusal}) and did not roll back: " + "; ".join(changes),
        )

    def _accepted_forbidden(self, index: int, op: str, args: dict[str, int]) -> Failure:
        # What the forbidden call did to the pool, in the invariants' words, so the failure shows its damage.
        damage = "; ".join(f"{i}: {m}" for i, m in check_snapshot(self.snap))
        return Failure(
            index,
            "accepted-forbidden",
            op,
            f"the pool accepted {_call(op, args)}, which the contract "
            "forbids in this state" + (f"; afterwards {damage}" if damage else ""),
        )

    def _judge(self, index: int, op: str, args: dict[str, int]) -> Failure | None:
        wrong = self.origins.wrong_pick(self.model.state, args) if op in RETRACTING else None
        if wrong:
            return Failure(index, "illegal-choice", op, f"{_call(op, args)} broke the retraction order: {wrong}")
        if not self.model.choice_ok(op, args):
            chosen = ", ".join(f"{k}={args[k]}" for k in self.model.action(op).choice if k in args)
            return Failure(
                index,
                "illegal-choice",
                op,
                f"the pool chose {chosen} for {_call(op, args)}, which the contract does not allow here",
            )
        self._note_origins(op, args)
        self.model.step(op, args)
        if "row" in args and op in ("admit", "extend", "pd_prealloc"):
            self.last_row[args["req"]] = args["row"]
        if op == "batch":
            for i, (entry_op, entry) in enumerate(batch_entries(args)):
                if entry_op in ("admit", "extend"):
                    self.last_row[entry["req"]] = args[f"row{i}"]
        if op == PREFILL_ROUND:
            self.last_row.update((args[f"req{i}"], args[f"row{i}"]) for i in range(args["size"]))
        return None

    def _note_origins(self, op: str, args: dict[str, int]) -> None:
        """The prompt each admission (alone or in a batch) or arrival in the queue brings, before the model steps past
        it."""
        entries = batch_entries(args) if op == "batch" else [(op, args)]
        for entry_op, entry in entries:
            if entry_op in ("admit", "queue", "pd_prealloc"):  # a PD-decode request arrives prefilled
                prompt = entry["fill"] if entry_op == "pd_prealloc" else entry.get("prompt", 0)
                self.origins.admitted(self.model.state, entry["req"], prompt)

    def _judge_evictions(
        self, index: int, before: PoolSnapshot, evictions: list[tuple[int, int]], unlocks_between: bool = False
    ) -> Failure | None:
        if not evictions and not before.tree_slots.numel():
            return None  # nothing evicted and no tree slot before: nothing the rules could find
        problems = check_evictions(before, self.snap, evictions, self.snap.page_size, unlocks_between)
        return Failure(index, "invariant", "eviction", "; ".join(problems)) if problems else None

    def _observe(self, index: int) -> Failure | None:
        violations = check_snapshot(self.snap) + [("row-generation", m) for m in self.generations.check(self.snap)]
        if violations:
            inv_id = violations[0][0]
            messages = [m for i, m in violations if i == inv_id]
            return Failure(index, "invariant", inv_id, "; ".join(messages))
        diffs = self.model.observe().differences(self._observation(self.snap))
        if diffs:
            return Failure(index, "mismatch", "abstraction", "model and pool disagree: " + "; ".join(diffs))
        return None

    def _observation(self, snap: PoolSnapshot) -> Observation:
        """`observe(snap)`, computed once per snapshot."""
        if self._seen is None or self._seen[0] is not snap:
            self._seen = (snap, observe(snap))
        return self._seen[1]


def _pool_state(target: Target, rid: int) -> dict[str, Any]:
    """What two release paths must agree on: free pages and rows as multisets, the tree, the request's record."""
    snap = target.snapshot()
    record = snap.records[rid]
    return {
        "free pages": sorted(snap.free_slots.tolist() + snap.release_slots.tolist()),
        "free rows": sorted(snap.free_rows),
        "tree slots": sorted(snap.tree_slots.tolist()),
        "tree sizes": (snap.evictable_size, snap.protected_size),
        "record": (record.row, record.allocated_len, record.tree_locked),
    }


def _run_path(clone: Target, path: str, rid: int) -> dict[str, Any] | str:
    """The pool state after `path` on `clone` (a copy of the target), or why it refused it."""
    try:
        _CALLS[path](clone, {"req": rid, "sentinel": 0})
    except Refused as exc:
        return f"refused: {exc}"
    except Exception as exc:  # a crash on a clone is a divergence to report, not the end of the run
        return f"crashed: {type(exc).__name__}: {exc}"
    return _pool_state(clone, rid)


def _differences(a: dict[str, Any] | str, b: dict[str, Any] | str) -> list[str]:
    if isinstance(a, str) or isinstance(b, str):
        return [] if a == b else [f"{a!r} vs {b!r}"]
    return [f"{key}: {a[key]} vs {b[key]}" for key in a if a[key] != b[key]]


def fault_corners(shot: Shot | None, outcome: str) -> list[str]:
    """The corner of a step whose fault plan fired: the point and what the step then did (refused, crashed, or
    absorbed it and went on)."""
    return [f"fault {shot.plan.point}: {outcome}"] if shot is not None and shot.fired else []


def changed_parts(expected: Observation, seen: Observation) -> list[str]:
    """Which parts of the observation differ (the model's, the pool's), in a failure id's words, in a fixed order:
    rows and slots by which way they went (`leaked`: fewer free than the model's, `freed`: more)."""
    rows, slots = seen.free_row_count - expected.free_row_count, seen.free_slot_count - expected.free_slot_count
    parts = {
        "leaked rows": rows < 0 or (rows == 0 and expected.free_rows != seen.free_rows),
        "freed rows": rows > 0,
        "leaked slots": slots < 0,
        "freed slots": slots > 0,
        "records": expected.records != seen.records,
        "tree": expected.tree_slot_count != seen.tree_slot_count,
        "generations": expected.generations != seen.generations,
        "group": (expected.group_open, expected.pending_slot_count) != (seen.group_open, seen.pending_slot_count),
    }
    return [name for name, changed in parts.items() if changed]


def refusal_corners(op: str, legal: bool, cause: Cause, args: dict[str, int] | None = None) -> list[str]:
    """Which corners a refused call reached, read from its cause: a refused forbidden call, exhaustion of rows or
    slots at the scheduler's budget, or an allocation path's own out-of-memory refusal (with the batch's entry
    ops)."""
    corners = [f"{op}: refused" if legal else f"{op}: forbidden call refused"]
    if cause is Cause.NO_ROW:
        corners.append("pool: out of rows")
    elif cause is Cause.NO_SLOTS:
        corners.append("pool: out of slots")
    elif cause in (Cause.ALLOC_ROWS, Cause.ALLOC_SLOTS):
        ops = sorted({entry_op for entry_op, _ in batch_entries(args)}) if op == "batch" and args else [op]
        corners.append(f"{cause.value} ({', '.join(ops)})")
    return corners


def _profiled_row(before: PoolSnapshot, after: PoolSnapshot) -> dict[str, int]:
    """The row PP profiling's synthetic requests took and how often: the first whose generation moved (0, 0 if
    none did; another row that moved is the abstraction's to report)."""
    for row, (was, now) in enumerate(zip(before.row_generation, after.row_generation, strict=True)):
        if row >= 1 and now != was:
            return {"row": row, "uses": now - was}
    return {"row": 0, "uses": 0}


def _stepped_past(op: str, args: dict[str, int]) -> int:
    """How far a finishing step's release keys past the committed length it started from: a finishing decode's
    own token, a verified run's tokens through its stop; 0 for a release alone."""
    return {"decode_finish": 1, "spec_finish": args.get("stop", 0)}.get(op, 0)


def _finish_corners(op: str, args: dict[str, int]) -> list[str]:
    """A finishing step's corners: what its check matched, and whether the stop cut the verified run short."""
    if op not in ("decode_finish", "spec_finish"):
        return []
    corners = [f"{op}: by {FINISH_BY[args['by']]}"]
    if op == "spec_finish":
        trimmed = args["stop"] < args["accepted"]
        corners.append(f"spec_finish: {'stop inside the run (trimmed)' if trimmed else 'stop ends the run'}")
    return corners


def step_corners(
    op: str, args: dict[str, int], choice: dict[str, int], before: PoolSnapshot, after: PoolSnapshot
) -> list[str]:
    """Which lifecycle corners an accepted step reached (for the coverage table)."""
    corners = [f"{op}: done"]
    if op == "batch":
        ops = sorted({entry_op for entry_op, _ in batch_entries(args)})
        corners.append(f"batch: {args['size']} entries ({', '.join(ops)})")
    corners += _finish_corners(op, args)
    if op == PREFILL_ROUND:
        corners += round_corners(choice, before, after)
    if op in RETRACTING:
        corners.append(f"{op}: retracted {('none', 'one', 'several')[min(choice['retracted'], 2)]}")
        if choice["aborted"]:
            corners.append(f"{op}: aborted the last request")
    record, previous = after.records.get(args.get("req", -1)), before.records.get(args.get("req", -1))
    if args.get("prefix", 0) > 0:
        corners.append(f"{op}: prefix matched in the tree")
    locked_before = previous.protected_len if previous is not None and previous.row is not None else 0
    if choice.get("dup", 0) > max(locked_before, args.get("prefix", 0)):
        corners.append(f"{op}: insert found tokens already cached")
    if choice.get("freed", 0) > 0:
        corners.append("evict: freed tree pages")
    if op == "extend" and previous is not None:
        corners.append("extend: next chunk on the same row" if previous.row is not None else "extend: re-admission")
    if record is not None and record.allocated_len > record.committed_len:
        corners.append("record: over-allocated (C < A)")
    if record is not None and record.tree_locked:
        corners.append("record: holds a tree lock")
    if not after.free_rows:
        corners.append("pool: every row held")
    return corners


def _call(op: str, args: dict[str, int]) -> str:
    return f"{op}(" + ", ".join(f"{k}={v}" for k, v in args.items()) + ")"
