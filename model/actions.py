"""The lifecycle actions, each written once as a guard and an update over `State`.

`enabled` is what the caller can know before the call (is it legal at all?); `choice_ok` judges what the
implementation chose during the call and reported as an argument: the row it handed out (`row`) and, with a
prefix tree, how much of an inserted key the tree already held (`dup`, the duplicates freed) or how much an
eviction freed (`freed`). The prefix a request matches on admission (`prefix`) is an argument the caller
reads from the tree before the call. The transition relation is `enabled and choice_ok and s' == update(s)`.

A fault variant replaces one contract action when its fault is on: it re-creates a historical bug so the
prover can show what the contract's guards prevent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.interp import PyOps
from model.state import NO_OWNER, SENTINEL_ROW, Sizes, State
from properties.vocabulary import (
    FINISH_BY,
    KIND_NORMAL,
    KIND_SKIP_INSERT,
    PROFILE_REQUESTS,
    PROFILE_TOKENS_PER_QUARTER,
    STATUS_DECODE,
    STATUS_DONE,
    STATUS_NEW,
    STATUS_PREFILL,
    STATUS_WAITING,
    holds,
    live_status,
    owned_slots,
    row_free,
)
from properties.vocabulary import ceil_align_in as ceil_align
from properties.vocabulary import page_floor_in as page_floor

Args = dict[str, Any]
Fn = Callable[[Any, Sizes, State, Args], Any]


def _true(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return True


@dataclass(frozen=True)
class Action:
    """One step of the lifecycle. `params` maps each argument to its sort: 'req', 'row' or 'len'."""

    name: str
    params: tuple[tuple[str, str], ...]
    enabled: Fn
    update: Fn
    choice_ok: Fn = _true
    choice: tuple[str, ...] = ()
    negative: bool = False
    fault: str | None = None
    halves: Halves | None = None  # where a batch splits it (`model.batch`)
    inner: Action | None = None  # the action an `evicting` wrapper evicts for
    optional: frozenset[str] = frozenset()  # arguments a step may leave out beyond `OPTIONAL_ARGS` (0 then)

    def transition(self, o: Any, p: Sizes, s: State, a: Args) -> tuple[Any, State]:
        return o.And(self.enabled(o, p, s, a), self.choice_ok(o, p, s, a)), self.update(o, p, s, a)


def ite_state(o: Any, c: Any, then: State, other: State) -> State:
    """`then` where `c` holds, else `other`, field by field for symbolic states."""
    if isinstance(o, PyOps):
        return then if c else other
    fields = {f.name: o.If(c, getattr(then, f.name), getattr(other, f.name)) for f in dataclasses.fields(State)}
    return State(**fields)


def _sel(o: Any, s: State, field: str, i: Any) -> Any:
    return o.select(getattr(s, field), i)


def _set(o: Any, s: State, i: Any, **values: Any) -> State:
    """Store `values` at index `i` of the named array fields."""
    return s.but(**{f: o.store(getattr(s, f), i, v) for f, v in values.items()})


def _status(o: Any, s: State, req: Any) -> Any:
    return _sel(o, s, "rec_status", req)


def _readmit_prompt(o: Any, s: State, req: Any) -> Any:
    """A re-admitted request recomputes everything it had: its prompt and any outputs (`len(fill_ids)`)."""
    C, prompt = _sel(o, s, "rec_C", req), _sel(o, s, "rec_prompt", req)
    return o.If(prompt < C, C, prompt)


def _active(o: Any, status: Any) -> Any:
    return o.If(o.Or(live_status(o, status), status == STATUS_WAITING), 1, 0)


def _set_status(o: Any, s: State, req: Any, status: Any) -> State:
    """Move `req` to `status`, keeping the count of requests the scheduler still has."""
    s = s.but(n_active=s.n_active + _active(o, status) - _active(o, _status(o, s, req)))
    return _set(o, s, req, rec_status=status)


def own_slots(o: Any, p: Sizes, s: State, req: Any) -> Any:
    """The slots a holding record owns alone: its pages from `P` up to `ceil_align(A)`."""
    return owned_slots(_sel(o, s, "rec_P", req), _sel(o, s, "rec_A", req), p.page_size)


# -- what the allocator takes back ------------------------------------------------------------------------


def freed(o: Any, s: State, k: Any) -> State:
    """`k` slots the allocator takes back: free at once, or, while a free group is open, pending until it ends."""
    grouped = s.group_open == 1
    return s.but(
        n_free_slots=o.If(grouped, s.n_free_slots, s.n_free_slots + k),
        pending_slots=o.If(grouped, s.pending_slots + k, s.pending_slots),
    )


# -- on-demand eviction ------------------------------------------------------------------------------------

# An allocation that may evict the tree on demand reads what it could evict before the call (`evictable`, the
# tree's evictable tokens less those its own match locks) and reports what it evicted (`evicted`).
EVICT_PARAMS = (("evictable", "len"), ("evicted", "len"))
# Arguments the harness reads from the target before each call (the matched prefix, what could be evicted): a
# trace may leave them out, since replay reads them afresh.
OBSERVED = frozenset({"prefix", "evictable"})
# Arguments a trace may leave out, with what they then are: a normal request, on a pool that neither could
# nor did evict on demand.
ARG_DEFAULTS = {"kind": 0, "priority": 0, "evictable": 0, "evicted": 0}
OPTIONAL_ARGS = OBSERVED | frozenset(ARG_DEFAULTS)


def _room(o: Any, p: Sizes, s: State, a: Args) -> State:
    """The state an on-demand allocation is judged on before the call: free slots plus what it could evict."""
    return s.but(n_free_slots=s.n_free_slots + a["evictable"]) if p.on_demand else s


def _after_eviction(o: Any, p: Sizes, s: State, a: Args) -> State:
    """`evicted` tree slots freed before the allocation takes its own."""
    if not p.on_demand:
        return s
    return freed(o, s.but(tree_slots=s.tree_slots - a["evicted"]), a["evicted"])


def _eviction_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    """What was evicted is whole pages, no more than could be; without on-demand eviction, nothing."""
    got = a["evicted"]
    if not p.on_demand:
        return got == 0
    could = a["evictable"]
    return o.And(got >= 0, got <= could, could <= s.tree_slots, page_floor(o, p, got) == got)


def evicting(action: Action) -> Action:
    """`action` as an allocation that may evict the tree on demand first (`PoolConfig.evict_on_demand`): legal
    when it fits in the free slots plus what it could evict; its choice must have evicted enough for the
    allocation, and the rest of the step is judged on the state after the eviction."""

    def enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
        return action.enabled(o, p, _room(o, p, s, a), a)

    def choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
        if not p.on_demand:  # nothing evicted: the action is judged exactly as written
            return o.And(_eviction_ok(o, p, s, a), action.choice_ok(o, p, s, a))
        after = _after_eviction(o, p, s, a)
        return o.And(_eviction_ok(o, p, s, a), action.enabled(o, p, after, a), action.choice_ok(o, p, after, a))

    def update(o: Any, p: Sizes, s: State, a: Args) -> State:
        return action.update(o, p, _after_eviction(o, p, s, a), a)

    return dataclasses.replace(
        action,
        params=action.params + EVICT_PARAMS,
        enabled=enabled,
        update=update,
        choice_ok=choice_ok,
        choice=(*action.choice, "evicted"),
        inner=action,
    )


def judged_action(
    name: str,
    params: tuple[tuple[str, str], ...],
    enabled: Fn,
    judge: Callable[[Sizes, State, Args], State | None],
    choice: tuple[str, ...],
    optional: frozenset[str] = frozenset(),
) -> Action:
    """A step the executable model judges whole (the decode retraction, the decode round, the pause): `judge`
    gives the state after it, or None where the pool's choice breaks the step's rule; the choice is legal exactly
    where `judge` answers, and the update is that answer."""

    def choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
        return judge(p, s, a) is not None

    def update(o: Any, p: Sizes, s: State, a: Args) -> State:
        after = judge(p, s, a)
        assert after is not None, "update on a choice the model does not allow"
        return after

    return Action(name, params, enabled, update, choice_ok, choice=choice, optional=optional)


# -- guards shared by several actions ---------------------------------------------------------------------


def reuse_ok_record(o: Any, s: State, req: Any) -> Any:
    """The reuse guard since PR #37167: a reused row must carry allocated KV."""
    return _sel(o, s, "rec_A", req) > 0


def reuse_ok_legacy(o: Any, s: State, req: Any) -> Any:
    """The reuse guard before PR #37167, read from scheduler fields (stale after release)."""
    return o.Or(_sel(o, s, "rec_inflight", req) > 0, _sel(o, s, "rec_C", req) > 0)


def _releasable(o: Any, p: Sizes, s: State, req: Any) -> Any:
    """release_kv_cache's asserts: it holds KV (the entry sentinel), and without speculation C == A."""
    A, C = _sel(o, s, "rec_A", req), _sel(o, s, "rec_C", req)
    exact = True if p.speculative else A == C
    return o.And(holds(o, s, req), A > 0, exact)


def _running(o: Any, s: State, req: Any) -> Any:
    return live_status(o, _status(o, s, req))


def _prefix_ok(o: Any, p: Sizes, s: State, prefix: Any, prompt: Any) -> Any:
    """A matched prefix: nothing without a tree; with one, whole pages, short of the prompt, held by the tree."""
    if not p.radix:
        return prefix == 0
    aligned = page_floor(o, p, prefix) == prefix
    return o.And(prefix >= 0, aligned, prefix <= page_floor(o, p, prompt - 1), prefix <= s.tree_slots)


def _dup_ok(o: Any, p: Sizes, s: State, low: Any, key_len: Any, dup: Any, inserts: Any) -> Any:
    """An insert of `key_len` tokens found `dup` of them already cached, at least the `low` the request locked
    (a request that does not insert, `inserts` false, reports nothing to judge)."""
    if not p.radix:
        return True
    found = o.And(low <= dup, dup <= key_len, dup <= s.tree_slots, page_floor(o, p, dup) == dup)
    return o.Or(o.Not(inserts), found)


# -- updates shared by several actions ---------------------------------------------------------------------


def _take_row(o: Any, p: Sizes, s: State, req: Any, row: Any, prefix: Any, seq: Any, prompt: Any) -> State:
    """Hand `row` to `req`, lock its matched `prefix`, and give it fresh pages for `[prefix, seq)`."""
    new = ceil_align(o, p, seq) - prefix
    s = _set(o, s, row, row_held=True, row_owner=req, row_gen=_sel(o, s, "row_gen", row) + 1)
    s = _set(
        o,
        s,
        req,
        rec_row=row,
        rec_P=prefix,
        rec_C=seq,
        rec_A=seq,
        rec_end=seq,
        rec_prompt=prompt,
        rec_inflight=0,
        rec_locked=o.If(prefix > 0, 1, 0),
    )
    return s.but(
        n_free_rows=s.n_free_rows - 1,
        n_held_rows=s.n_held_rows + 1,
        n_free_slots=s.n_free_slots - new,
        owned_slots=s.owned_slots + new,
    )


def _grow(o: Any, p: Sizes, s: State, req: Any, seq: Any) -> State:
    """The next chunk of a holding record, in place: pages up to `ceil_align(seq)`."""
    new = ceil_align(o, p, seq) - ceil_align(o, p, _sel(o, s, "rec_A", req))
    s = _set(o, s, req, rec_C=seq, rec_A=seq, rec_end=seq)
    return s.but(n_free_slots=s.n_free_slots - new, owned_slots=s.owned_slots + new)


def _inserts(o: Any, p: Sizes, s: State, req: Any) -> Any:
    """Whether the request's stash and release insert into the tree: a tree, and not a skip-insert kind."""
    return False if not p.radix else _sel(o, s, "rec_kind", req) != KIND_SKIP_INSERT


def _stash(o: Any, p: Sizes, s: State, req: Any, dup: Any) -> State:
    """`cache_unfinished_req` on a tree: `[0, page_floor(C))` becomes tree-owned, duplicates `[P, dup)` freed,
    and the record's protected prefix and lock move up to the inserted key; a skip-insert request keeps its own
    slots and its matched prefix."""
    if not p.radix:
        return s
    P, key_len = _sel(o, s, "rec_P", req), page_floor(o, p, _sel(o, s, "rec_C", req))
    stashed = freed(
        o, s.but(tree_slots=s.tree_slots + key_len - dup, owned_slots=s.owned_slots - (key_len - P)), dup - P
    )
    stashed = _set(o, stashed, req, rec_P=key_len, rec_locked=o.If(key_len > 0, 1, 0))
    return ite_state(o, _inserts(o, p, s, req), stashed, s)


def _after_prefill(o: Any, s: State, req: Any) -> State:
    """A request whose prompt is all in KV decodes next; otherwise it waits for its next chunk."""
    done = _sel(o, s, "rec_C", req) >= _sel(o, s, "rec_prompt", req)
    return _set_status(o, s, req, o.If(done, STATUS_DECODE, STATUS_PREFILL))


def _return_row(o: Any, s: State, row: Any) -> State:
    s = _set(o, s, row, row_held=False, row_owner=NO_OWNER)
    return s.but(n_free_rows=s.n_free_rows + 1, n_held_rows=s.n_held_rows - 1)


def _release(
    o: Any, p: Sizes, s: State, req: Any, insert: bool, dup: Any, clear_row: bool = True, upto: Any = None
) -> State:
    """`release_kv_cache`: with `insert`, `[0, page_floor(upto))` goes to the tree (duplicates freed); every other
    page of the record is freed; the lock is released, the row returned and the record marked released. `upto` is
    `owned_kv_len()`: `C`, or less where a stop landed inside a verified run (`finished_len`)."""
    row = _sel(o, s, "rec_row", req)
    upto = _sel(o, s, "rec_C", req) if upto is None else upto
    owned = own_slots(o, p, s, req)
    cached = o.If(_inserts(o, p, s, req), page_floor(o, p, upto) - dup, 0) if insert else 0
    s = freed(o, s.but(tree_slots=s.tree_slots + cached, owned_slots=s.owned_slots - owned), owned - cached)
    s = _set(o, _return_row(o, s, row), req, rec_A=0, rec_locked=0)
    return _set(o, s, req, rec_row=0) if clear_row else s


def _reset_for_retract(o: Any, s: State, req: Any) -> State:
    """`reset_for_retract`; the request's prompt becomes all it has computed, outputs included."""
    s = _set(o, s, req, rec_P=0, rec_C=0, rec_end=0, rec_inflight=0, rec_prompt=_readmit_prompt(o, s, req))
    return _set_status(o, s, req, STATUS_WAITING)


# -- the actions -------------------------------------------------------------------------------------------

# `family` names the prompt's token stream (requests of one family share prefixes); the model does not read it.
# `kind` is the request's kind (`KIND_*`).
ADMIT_PARAMS = (
    ("req", "req"),
    ("prompt", "len"),
    ("n", "len"),
    ("family", "len"),
    ("kind", "len"),
    ("prefix", "len"),
    ("row", "row"),
    ("dup", "len"),
)


def _seq(o: Any, start: Any, n: Any, prompt: Any) -> Any:
    return o.If(start + n < prompt, start + n, prompt)


@dataclass(frozen=True)
class Halves:
    """An extend split where a batch interleaves it with others: `alloc` takes the row (judged by `row_ok`) and
    the slots; `result` is the result pass's stash and status; `insert` gives the (low, key length) of the insert
    that stash makes, read on the state before `alloc`, for judging what the insert found cached."""

    alloc: Fn
    row_ok: Fn
    result: Fn
    insert: Callable[[Any, Sizes, State, Args], tuple[Any, Any]]


def _prefill_result(o: Any, p: Sizes, s: State, a: Args) -> State:
    """The result pass of a prefill extend: the stash (an insert that found `dup` tokens cached), the status."""
    return _after_prefill(o, _stash(o, p, s, a["req"], a["dup"]), a["req"])


def _with_halves(name: str, params: tuple[tuple[str, str], ...], enabled: Fn, halves: Halves) -> Action:
    """The atomic action the halves make: alloc then result, the row judged before, the insert after alloc."""

    def update(o: Any, p: Sizes, s: State, a: Args) -> State:
        return halves.result(o, p, halves.alloc(o, p, s, a), a)

    def choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
        low, key_len = halves.insert(o, p, s, a)
        inserts = _inserts(o, p, halves.alloc(o, p, s, a), a["req"])  # after alloc: an admission sets its kind
        return o.And(halves.row_ok(o, p, s, a), _dup_ok(o, p, s, low, key_len, a["dup"], inserts))

    return Action(name, params, enabled, update, choice_ok, choice=("row", "dup"), halves=halves)


def _admit_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req, prompt, n, prefix = a["req"], a["prompt"], a["n"], a["prefix"]
    seq = _seq(o, prefix, n, prompt)
    fits = ceil_align(o, p, seq) - prefix <= s.n_free_slots
    shape = o.And(req >= 0, prompt >= 1, prompt <= p.width, n >= 1, s.n_free_rows > 0)
    kind = o.Or(a["kind"] == KIND_NORMAL, a["kind"] == KIND_SKIP_INSERT)
    return o.And(shape, kind, _status(o, s, req) == STATUS_NEW, _prefix_ok(o, p, s, prefix, prompt), fits)


def _admit_alloc(o: Any, p: Sizes, s: State, a: Args) -> State:
    req, seq = a["req"], _seq(o, a["prefix"], a["n"], a["prompt"])
    s = _set(o, s, req, rec_kind=a["kind"])
    return _take_row(o, p, s, req, a["row"], a["prefix"], seq, a["prompt"])


def _admit_insert(o: Any, p: Sizes, s: State, a: Args) -> tuple[Any, Any]:
    return a["prefix"], page_floor(o, p, _seq(o, a["prefix"], a["n"], a["prompt"]))


ADMIT = evicting(
    _with_halves(
        "admit",
        ADMIT_PARAMS,
        _admit_enabled,
        Halves(_admit_alloc, lambda o, p, s, a: row_free(o, p, s, a["row"]), _prefill_result, _admit_insert),
    )
)

# `priority` is the scheduler's (a prefill round may preempt running requests of a lower one); the model does not
# read it: which requests a preemption takes is the pool's choice (`model.prefill_round`).
QUEUE_PARAMS = (("req", "req"), ("prompt", "len"), ("family", "len"), ("kind", "len"), ("priority", "len"))


def _queue_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    """A new request, its prompt in a row's width, of a known kind (what `_add_request_to_queue` is handed)."""
    req, prompt, kind = a["req"], a["prompt"], a["kind"]
    shape = o.And(req >= 0, prompt >= 1, prompt <= p.width, a["priority"] >= 0)
    known = o.Or(kind == KIND_NORMAL, kind == KIND_SKIP_INSERT)
    return o.And(shape, known, _status(o, s, req) == STATUS_NEW)


def _queue_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """The request waits in the queue holding nothing, as a retracted one does; an extend admits it."""
    s = _set(o, s, a["req"], rec_prompt=a["prompt"], rec_kind=a["kind"])
    return _set_status(o, s, a["req"], STATUS_WAITING)


# A request the scheduler queued and has not admitted yet (`Scheduler._add_request_to_queue`).
QUEUE = Action("queue", QUEUE_PARAMS, _queue_enabled, _queue_update)

EXTEND_PARAMS = (("req", "req"), ("n", "len"), ("prefix", "len"), ("row", "row"), ("dup", "len"))


def _extend_enabled(reuse_ok: Callable[[Any, State, Any], Any]) -> Fn:
    def enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
        req, n, prefix = a["req"], a["n"], a["prefix"]
        C, prompt, status = _sel(o, s, "rec_C", req), _sel(o, s, "rec_prompt", req), _status(o, s, req)
        # The pool's reuse guard alone judges a record that names a row (a chunk continuation, or a released
        # record re-admitted); the scheduler only keeps decoding requests from extending again.
        not_decoding = o.And(status != STATUS_NEW, status != STATUS_DECODE)
        grow = ceil_align(o, p, _seq(o, C, n, prompt)) - ceil_align(o, p, _sel(o, s, "rec_A", req))
        reuse = o.And(reuse_ok(o, s, req), prefix == _sel(o, s, "rec_P", req), prompt > C, grow <= s.n_free_slots)
        target = _readmit_prompt(o, s, req)
        fresh_fits = ceil_align(o, p, _seq(o, prefix, n, target)) - prefix <= s.n_free_slots
        fresh = o.And(s.n_free_rows > 0, _prefix_ok(o, p, s, prefix, target), target <= p.width, fresh_fits)
        return o.And(req >= 0, n >= 1, not_decoding, o.If(holds(o, s, req), reuse, fresh))

    return enabled


def _extend_row_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req, row = a["req"], a["row"]
    return o.If(holds(o, s, req), row == _sel(o, s, "rec_row", req), row_free(o, p, s, row))


def _extend_insert(o: Any, p: Sizes, s: State, a: Args) -> tuple[Any, Any]:
    req, held = a["req"], holds(o, s, a["req"])
    start = o.If(held, _sel(o, s, "rec_C", req), a["prefix"])
    target = o.If(held, _sel(o, s, "rec_prompt", req), _readmit_prompt(o, s, req))
    low = o.If(held, _sel(o, s, "rec_P", req), a["prefix"])
    return low, page_floor(o, p, _seq(o, start, a["n"], target))


def _extend_alloc(o: Any, p: Sizes, s: State, a: Args) -> State:
    req, n, prompt = a["req"], a["n"], _sel(o, s, "rec_prompt", a["req"])
    grown = _grow(o, p, s, req, _seq(o, _sel(o, s, "rec_C", req), n, prompt))
    target = _readmit_prompt(o, s, req)
    fresh = _take_row(o, p, s, req, a["row"], a["prefix"], _seq(o, a["prefix"], n, target), target)
    return ite_state(o, holds(o, s, req), grown, fresh)


EXTEND_HALVES = Halves(_extend_alloc, _extend_row_ok, _prefill_result, _extend_insert)


_EXTEND = _with_halves("extend", EXTEND_PARAMS, _extend_enabled(reuse_ok_record), EXTEND_HALVES)
EXTEND = evicting(_EXTEND)
EXTEND_LEGACY = evicting(
    dataclasses.replace(_EXTEND, enabled=_extend_enabled(reuse_ok_legacy), fault="legacy_reuse_guard")
)


def _decode_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req = a["req"]
    C, A = _sel(o, s, "rec_C", req), _sel(o, s, "rec_A", req)
    new = ceil_align(o, p, C + 1) - ceil_align(o, p, A)
    decoding = _status(o, s, req) == STATUS_DECODE
    return o.And(decoding, holds(o, s, req), C == A, p.width >= C + 1, new <= s.n_free_slots)


def _decode_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    req = a["req"]
    C = _sel(o, s, "rec_C", req)
    new = ceil_align(o, p, C + 1) - ceil_align(o, p, C)
    s = _set(o, s, req, rec_C=C + 1, rec_A=C + 1)
    return s.but(n_free_slots=s.n_free_slots - new, owned_slots=s.owned_slots + new)


DECODE = evicting(Action("decode", (("req", "req"),), _decode_enabled, _decode_update))


def _spec_next(o: Any, p: Sizes, s: State, req: Any, reserve: Any) -> Any:
    """The allocated length after a speculative prepare: `max(A, ceil_align(C + reserve))`."""
    want, A = ceil_align(o, p, _sel(o, s, "rec_C", req) + reserve), _sel(o, s, "rec_A", req)
    return o.If(want > A, want, A)


def _spec_prepare_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    if not p.speculative:
        return False
    req, nxt = a["req"], _spec_next(o, p, s, a["req"], a["reserve"])
    new = ceil_align(o, p, nxt) - ceil_align(o, p, _sel(o, s, "rec_A", req))
    decoding = _status(o, s, req) == STATUS_DECODE
    return o.And(decoding, holds(o, s, req), a["reserve"] >= 1, nxt <= p.width, new <= s.n_free_slots)


def _spec_prepare_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    req, nxt = a["req"], _spec_next(o, p, s, a["req"], a["reserve"])
    new = ceil_align(o, p, nxt) - ceil_align(o, p, _sel(o, s, "rec_A", req))
    s = _set(o, s, req, rec_A=nxt)
    return s.but(n_free_slots=s.n_free_slots - new, owned_slots=s.owned_slots + new)


SPEC_PREPARE = evicting(
    Action("spec_prepare", (("req", "req"), ("reserve", "len")), _spec_prepare_enabled, _spec_prepare_update)
)


def _spec_commit_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req, accepted = a["req"], a["accepted"]
    room = _sel(o, s, "rec_C", req) + accepted <= _sel(o, s, "rec_A", req)
    return o.And(_status(o, s, req) == STATUS_DECODE, holds(o, s, req), accepted >= 1, room)


SPEC_COMMIT = Action(
    "spec_commit",
    (("req", "req"), ("accepted", "len")),
    _spec_commit_enabled,
    lambda o, p, s, a: _set(o, s, a["req"], rec_C=_sel(o, s, "rec_C", a["req"]) + a["accepted"]),
)


def _release_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return o.And(_running(o, s, a["req"]), _releasable(o, p, s, a["req"]))


def _finish_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    """A request finishes from decoding; mid-prefill only an abort ends it."""
    return o.And(_status(o, s, a["req"]) == STATUS_DECODE, _releasable(o, p, s, a["req"]))


def _finish_choice_ok(o: Any, p: Sizes, s: State, a: Args, upto: Any = None) -> Any:
    req = a["req"]
    key_len = page_floor(o, p, _sel(o, s, "rec_C", req) if upto is None else upto)
    return _dup_ok(o, p, s, _sel(o, s, "rec_P", req), key_len, a["dup"], _inserts(o, p, s, req))


def _finish_update(clear_row: bool) -> Fn:
    def update(o: Any, p: Sizes, s: State, a: Args) -> State:
        s = _release(o, p, s, a["req"], True, a["dup"], clear_row)
        return _set_status(o, s, a["req"], STATUS_DONE)

    return update


def _no_insert_update(clear_row: bool) -> Fn:
    def update(o: Any, p: Sizes, s: State, a: Args) -> State:
        s = _release(o, p, s, a["req"], False, 0, clear_row)
        return _set_status(o, s, a["req"], STATUS_DONE)

    return update


REQ_ONLY = (("req", "req"),)
FINISH = Action(
    "finish",
    (("req", "req"), ("dup", "len")),
    _finish_enabled,
    _finish_update(True),
    _finish_choice_ok,
    choice=("dup",),
)
PP_RELEASE = Action("pp_release", REQ_ONLY, _release_enabled, _no_insert_update(True))
FINISH_RAW = dataclasses.replace(FINISH, update=_finish_update(False), fault="raw_row_free")
PP_RELEASE_RAW = dataclasses.replace(PP_RELEASE, update=_no_insert_update(False), fault="raw_row_free")


# -- finishes found by the result pass's check -------------------------------------------------------------

# What the check matched (`by`, `FINISH_BY`): the model does not read it, each ends the request alike, which is
# the claim the targets are held to.


def _by_ok(o: Any, a: Args) -> Any:
    return o.And(a["by"] >= 0, a["by"] < len(FINISH_BY))


def _decode_finish_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return o.And(_decode_enabled(o, p, s, a), _by_ok(o, a))


def _decode_finish_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """A decode whose sampled token ends the request: the step's KV, then the finish release in its result pass
    (the stop is the last token, so the release owns all of `C`)."""
    return _finish_update(True)(o, p, _decode_update(o, p, s, a), a)


DECODE_FINISH = evicting(
    Action(
        "decode_finish",
        (("req", "req"), ("by", "len"), ("dup", "len")),
        _decode_finish_enabled,
        _decode_finish_update,
        lambda o, p, s, a: _finish_choice_ok(o, p, _decode_update(o, p, s, a), a),
        choice=("dup",),
    )
)


def _spec_finish_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    stop = a["stop"]
    return o.And(_spec_commit_enabled(o, p, s, a), stop >= 1, stop <= a["accepted"], _by_ok(o, a))


def _spec_finish_upto(o: Any, s: State, a: Args) -> Any:
    """`owned_kv_len()` after a verified run that holds the stop at its `stop`-th token: the KV through the stop;
    the tokens the run committed past it are the client's never (`finished_len`)."""
    return _sel(o, s, "rec_C", a["req"]) + a["stop"]


def _spec_committed(o: Any, s: State, a: Args) -> State:
    return _set(o, s, a["req"], rec_C=_sel(o, s, "rec_C", a["req"]) + a["accepted"])


def _spec_finish_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    upto = _spec_finish_upto(o, s, a)
    s = _release(o, p, _spec_committed(o, s, a), a["req"], True, a["dup"], upto=upto)
    return _set_status(o, s, a["req"], STATUS_DONE)


def _spec_finish_choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return _finish_choice_ok(o, p, _spec_committed(o, s, a), a, upto=_spec_finish_upto(o, s, a))


SPEC_FINISH = Action(
    "spec_finish",
    (("req", "req"), ("accepted", "len"), ("stop", "len"), ("by", "len"), ("dup", "len")),
    _spec_finish_enabled,
    _spec_finish_update,
    _spec_finish_choice_ok,
    choice=("dup",),
)


def _manual_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """Frees the pages of `[0, extend_range.end)` raw, whatever the record owns or the tree holds; no unlock."""
    req = a["req"]
    raw, owned = ceil_align(o, p, _sel(o, s, "rec_end", req)), own_slots(o, p, s, req)
    s = freed(o, s.but(owned_slots=s.owned_slots - owned), raw)
    s = _return_row(o, s, _sel(o, s, "rec_row", req))
    return _set_status(o, _set(o, s, req, rec_row=0, rec_A=0), req, STATUS_DONE)


def manual_release_preconditions(o: Any, p: Sizes, s: State, req: Any) -> list[Any]:
    """PR #37167's argument that the hand-written release equals `release_kv_cache(is_insert=False)`."""
    P, C, A, end = (_sel(o, s, f, req) for f in ("rec_P", "rec_C", "rec_A", "rec_end"))
    return [P == 0, C == A, end == C, _sel(o, s, "rec_locked", req) == 0]


MANUAL_PRECONDITIONS = (
    "cache_protected_len == 0",
    "kv_committed_len == kv_allocated_len",
    "kv_committed_len == extend_range.end",
    "last_node is None",
)


def _manual_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    # PP profiling guarantees the preconditions; outside them the hand-written path is not a legal release.
    req = a["req"]
    return o.And(_running(o, s, req), holds(o, s, req), *manual_release_preconditions(o, p, s, req))


PP_RELEASE_MANUAL = Action("pp_release_manual", REQ_ONLY, _manual_enabled, _manual_update)


def _pp_profile_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    """PP dynamic-chunk profiling admits synthetic requests one at a time, each released before the next, none
    matching or keying the tree: it needs a row and the longest prompt's pages free (no eviction), the row wide
    enough, and no open free group (at server start there is none)."""
    longest = a["quarter"] * PROFILE_TOKENS_PER_QUARTER
    fits = o.And(longest <= p.width, ceil_align(o, p, longest) <= s.n_free_slots)
    return o.And(a["quarter"] >= 1, s.n_free_rows >= 1, fits, s.group_open == 0)


def _pp_profile_choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    """The synthetic requests took one free row in turn (each gives it back before the next asks), `uses` times."""
    return o.And(row_free(o, p, s, a["row"]), a["uses"] >= 1, a["uses"] <= PROFILE_REQUESTS)


def _pp_profile_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """What the profiling's requests take, they give back: the pool is as it was, its row handed out `uses` times
    more."""
    return _set(o, s, a["row"], row_gen=_sel(o, s, "row_gen", a["row"]) + a["uses"])


PP_PROFILE = Action(
    "pp_profile",
    (("quarter", "len"), ("row", "row"), ("uses", "len")),
    _pp_profile_enabled,
    _pp_profile_update,
    _pp_profile_choice_ok,
    choice=("row", "uses"),
)


def _retract_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    return _reset_for_retract(o, _release(o, p, s, a["req"], False, 0), a["req"])


RETRACT = evicting(Action("retract", REQ_ONLY, _release_enabled, _retract_update))


def _abort_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    status = _status(o, s, a["req"])
    return o.Or(status == STATUS_WAITING, _release_enabled(o, p, s, a))


def _abort_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """Queued: dropped. Mid-prefill: the pending chunked abort releases without insert. Decoding: it runs one
    more step marked to finish and is released as a normal finish (with insert)."""
    req, status = a["req"], _status(o, s, a["req"])
    decoding = _release(o, p, s, req, True, a["dup"])
    prefill = _release(o, p, s, req, False, 0)
    released = ite_state(o, status == STATUS_DECODE, decoding, ite_state(o, status == STATUS_PREFILL, prefill, s))
    return _set_status(o, released, req, STATUS_DONE)


def _abort_choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    return o.Implies(_status(o, s, a["req"]) == STATUS_DECODE, _finish_choice_ok(o, p, s, a))


ABORT = Action(
    "abort", (("req", "req"), ("dup", "len")), _abort_enabled, _abort_update, _abort_choice_ok, choice=("dup",)
)


def _evict_choice_ok(o: Any, p: Sizes, s: State, a: Args) -> Any:
    got = a["freed"]
    return o.And(got >= 0, got <= s.tree_slots, page_floor(o, p, got) == got)


EVICT = Action(
    "evict",
    (("n", "len"), ("freed", "len")),
    lambda o, p, s, a: a["n"] >= 1,  # a chunk cache evicts nothing, and says so
    lambda o, p, s, a: freed(o, s.but(tree_slots=s.tree_slots - a["freed"]), a["freed"]),
    _evict_choice_ok,
    choice=("freed",),
)

FLUSH = Action(
    "flush",
    (),
    lambda o, p, s, a: o.And(s.n_held_rows == 0, s.owned_slots == 0, s.n_active == 0, s.group_open == 0),
    lambda o, p, s, a: s.but(tree_slots=0, n_free_slots=s.n_free_slots + s.tree_slots),
)


def _prealloc_enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
    req, fill = a["req"], a["fill"]
    shape = o.And(req >= 0, fill >= 1, fill <= p.width, s.n_free_rows > 0)
    return o.And(shape, _status(o, s, req) == STATUS_NEW, ceil_align(o, p, fill) <= s.n_free_slots)


def _prealloc_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    s = _take_row(o, p, s, a["req"], a["row"], 0, a["fill"], a["fill"])
    return _set_status(o, s, a["req"], STATUS_DECODE)


PD_PREALLOC = evicting(
    Action(
        "pd_prealloc",
        (("req", "req"), ("fill", "len"), ("row", "row")),
        _prealloc_enabled,
        _prealloc_update,
        lambda o, p, s, a: row_free(o, p, s, a["row"]),
        choice=("row",),
    )
)


# -- the decode-offload release: a second release path beside release_kv_cache --------------------------------


def offload_guard_raw(o: Any, row: Any) -> Any:
    """`_release_finished_req` goes on unless `req_pool_idx is None or == -1`: a raw field read PR #37167 kept."""
    return o.And(row != 0, row != SENTINEL_ROW)


def offload_guard_presence(o: Any, row: Any) -> Any:
    """The presence check `holds_kv` in its place (`req_pool_idx is not None`): the `-1` sentinel passes it."""
    return row != 0


def offload_row(o: Any, s: State, a: Args) -> Any:
    """The `req_pool_idx` the offload release reads: the record's row, or with `sentinel` the `-1` a legacy
    free left in place of None."""
    return o.If(a["sentinel"] == 1, SENTINEL_ROW, _sel(o, s, "rec_row", a["req"]))


def _offload_enabled(guard: Callable[[Any, Any], Any]) -> Fn:
    def enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
        req, sentinel, status = a["req"], a["sentinel"], _status(o, s, a["req"])
        # It runs once the scheduler has finished the request, whether or not another path released it first.
        finished = o.Or(status == STATUS_DECODE, status == STATUS_DONE)
        # Only a record that holds no row can carry the sentinel in place of None.
        carried = o.Or(sentinel == 0, o.And(sentinel == 1, o.Not(holds(o, s, req))))
        # Its raw free of `[0, prefill_len)` is sound only for a request that protects no tree prefix (PD decode).
        unprotected = _sel(o, s, "rec_P", req) == 0
        return o.And(req >= 0, finished, carried, unprotected, guard(o, offload_row(o, s, a)))

    return enabled


def _offload_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """Frees `[0, prefill_len)`, `[prefill_len, n)` and `[ceil_align(n), A)` of the row it read, returns that row
    and marks the record released; `protected_size_ -= len(prefix_indices)` unlocks nothing."""
    req = a["req"]
    C, A = _sel(o, s, "rec_C", req), _sel(o, s, "rec_A", req)
    over = ceil_align(o, p, A) - ceil_align(o, p, C)
    raw = ceil_align(o, p, C) + o.If(over > 0, over, 0)
    owned = o.If(holds(o, s, req), own_slots(o, p, s, req), 0)
    s = freed(o, s.but(owned_slots=s.owned_slots - owned), raw)
    s = _set(o, _return_row(o, s, offload_row(o, s, a)), req, rec_row=0, rec_A=0)
    return _set_status(o, s, req, STATUS_DONE)


OFFLOAD_PARAMS = (("req", "req"), ("sentinel", "len"))
OFFLOAD_RELEASE = Action("offload_release", OFFLOAD_PARAMS, _offload_enabled(offload_guard_raw), _offload_update)
OFFLOAD_RELEASE_PRESENCE = dataclasses.replace(
    OFFLOAD_RELEASE, enabled=_offload_enabled(offload_guard_presence), fault="offload_presence_guard"
)


# -- negative steps: calls the contract forbids, made to check that the pool refuses them ----------------


def _reuse_released_enabled(reuse_ok: Callable[[Any, State, Any], Any]) -> Fn:
    def enabled(o: Any, p: Sizes, s: State, a: Args) -> Any:
        req, row, n = a["req"], a["row"], a["n"]
        released = o.And(_status(o, s, req) == STATUS_DONE, o.Not(holds(o, s, req)))
        fits = o.And(row >= 1, row <= p.rows, n >= 1)
        return o.And(released, fits, reuse_ok(o, s, req))

    return enabled


REUSE_RELEASED = Action(
    "reuse_released",
    (("req", "req"), ("row", "row"), ("n", "len")),
    _reuse_released_enabled(reuse_ok_record),
    lambda o, p, s, a: s,
    negative=True,
)
REUSE_RELEASED_LEGACY = dataclasses.replace(
    REUSE_RELEASED, enabled=_reuse_released_enabled(reuse_ok_legacy), fault="legacy_reuse_guard"
)
RELEASE_AGAIN = Action(
    "release_again",
    REQ_ONLY,
    lambda o, p, s, a: _releasable(o, p, s, a["req"]),
    lambda o, p, s, a: _release(o, p, s, a["req"], False, 0),
    negative=True,
)
FREE_ROW = Action(
    "free_row",
    REQ_ONLY,
    lambda o, p, s, a: holds(o, s, a["req"]),
    lambda o, p, s, a: _set(o, _return_row(o, s, _sel(o, s, "rec_row", a["req"])), a["req"], rec_row=0),
    negative=True,
)

# -- free groups: the result pass frees what it releases at once, at the group's end ------------------------

GROUP_BEGIN = Action(
    "group_begin",
    (),
    lambda o, p, s, a: s.group_open == 0,  # not re-entrant: a nested begin would drop the pending frees
    lambda o, p, s, a: s.but(group_open=1),
)


def _group_end_update(o: Any, p: Sizes, s: State, a: Args) -> State:
    """The pending frees come back; without an open group nothing happens."""
    ended = s.but(n_free_slots=s.n_free_slots + s.pending_slots, pending_slots=0, group_open=0)
    return ite_state(o, s.group_open == 1, ended, s)


GROUP_END = Action("group_end", (), lambda o, p, s, a: True, _group_end_update)

CONTRACT: tuple[Action, ...] = (
    ADMIT,
    QUEUE,
    EXTEND,
    DECODE,
    SPEC_PREPARE,
    SPEC_COMMIT,
    FINISH,
    DECODE_FINISH,
    SPEC_FINISH,
    PP_RELEASE,
    PP_RELEASE_MANUAL,
    PP_PROFILE,
    RETRACT,
    ABORT,
    EVICT,
    FLUSH,
    GROUP_BEGIN,
    GROUP_END,
    PD_PREALLOC,
    OFFLOAD_RELEASE,
    REUSE_RELEASED,
    RELEASE_AGAIN,
    FREE_ROW,
)
VARIANTS: tuple[Action, ...] = (
    EXTEND_LEGACY,
    FINISH_RAW,
    PP_RELEASE_RAW,
    REUSE_RELEASED_LEGACY,
    OFFLOAD_RELEASE_PRESENCE,
)
MODELED_FAULTS = frozenset(v.fault for v in VARIANTS if v.fault)


def actions_for(faults: frozenset[str] = frozenset()) -> dict[str, Action]:
    """The action table with each named fault's variants in place of the contract definitions."""
    unknown = faults - MODELED_FAULTS
    if unknown:
        raise ValueError(f"the model has no variant for faults {sorted(unknown)}")
    table = {a.name: a for a in CONTRACT}
    for variant in VARIANTS:
        if variant.fault in faults:
            table[variant.name] = variant
    return table
