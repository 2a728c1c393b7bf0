"""Named fault switches: each re-creates one historical bug at one named place in the reference pool.

A fault is a test fixture of the harness. `PATTERNS` lists every historical bug pattern the harness is graded on
(PR #37167's two and the catalog of shipped lifecycle bugs); `FAULTS` are the in-scope ones, each a switch at
its `site`. A pattern the reference pool cannot express (it needs mamba slots, sessions, a PD transfer in
flight, ...) is registered out of scope with the reason, so none is dropped silently. Every switch is off
unless a caller names it; `FaultSet()` is the empty set, and `tests/impl/test_faults.py` proves that a default
pool behaves as the contract says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fault:
    """One historical bug: where the switch acts, what it changes, and where the bug was shipped.

    An out-of-scope pattern has no switch; `out_of_scope` says in one line what the pool would need for one.
    """

    name: str
    site: str
    mechanism: str
    origin: str
    in_scope: bool = True
    out_of_scope: str = ""
    # The percentage of steps a run must give fault plans (`impl.fault_points`) for the switch to act: a switch
    # on the path a failed call takes acts only where a call fails.
    fault_rate: int = 0


_IN_SCOPE = (
    Fault(
        name="failed_alloc_keeps_rows",
        site="alloc_for_extend / alloc_for_decode_prealloc (after the row allocation)",
        mechanism="a slot allocation that fails after the call took its rows raises without giving the rows "
        "back, so the failed call leaves rows taken that no request holds",
        origin="sglang mem_cache/allocation.py alloc_for_extend and disaggregation/decode.py _pre_alloc (rows "
        "first, then the slots' fail-loud RuntimeError or assert; 0.5.18-0.5.23 keep the rows)",
        fault_rate=10,
    ),
    Fault(
        name="legacy_reuse_guard",
        site="ReqToTokenPool.alloc (reuse guard)",
        mechanism="the row-reuse assert reads scheduler fields (inflight_middle_chunks > 0 or "
        "kv_committed_len > 0) instead of the record (kv_allocated_len > 0); a released record keeps a "
        "stale kv_committed_len, so a stale req_pool_idx passes",
        origin="sglang PR #37167 (the guard it replaced, from #19465)",
    ),
    Fault(
        name="pp_manual_release",
        site="ReferencePool.pp_release",
        mechanism="the PP-profiling release runs the hand-written release (raw free of row[0:extend_range.end], "
        "row free, mark) instead of release_kv_cache(is_insert=False), ignoring cache_protected_len, "
        "kv_len_to_handle, the over-allocation and the tree lock",
        origin="sglang PR #37167 (profile_and_init_predictor before the PR)",
    ),
    Fault(
        name="raw_row_free",
        site="release_kv_cache (row step)",
        mechanism="the row goes back with free_rows and the record is marked released, but "
        "req_pool_idx is left set, so the record still claims a row that is free",
        origin="sglang PR #37167 (bypass paths that skipped ReqToTokenPool.free)",
    ),
    Fault(
        name="manual_release_skips_mark",
        site="pp_release_manual (record mark)",
        mechanism="the hand-written PP release frees the slots and the row but never calls mark_kv_released, "
        "so the record keeps kv_allocated_len > 0 with holds_kv False",
        origin="sglang PR #37167 (the hand-rolled release skipped the record mark)",
    ),
    Fault(
        name="offload_presence_guard",
        site="release_offloaded (early-return guard)",
        mechanism="the decode-offload release guards with the presence check holds_kv (req_pool_idx is not None) "
        "instead of the raw read req_pool_idx is None or == -1, so a released record carrying the -1 sentinel "
        "is released again: its stale slots freed, row -1 put on the free list, protected_size_ decremented twice",
        origin="sglang PR #37167 (the sentinel check in DecodeKVCacheOffloadManager kept as a raw read)",
    ),
    Fault(
        name="chunk_row_free_between_chunks",
        site="ReferencePool._extend_result (after the chunk stash)",
        mechanism="a chunked request gives its row back at the stash and takes a fresh one for its next "
        "chunk, so between chunks it runs without a row and another request can take the old one",
        origin="sglang PR #17850 (req-aware alloc(reqs) keeps the row)",
    ),
    Fault(
        name="release_len_from_token_counts",
        site="release_kv_cache (handled length)",
        mechanism="the release handles len(input) + max(len(output) - 1, 0) tokens, counted from the token "
        "lists instead of read from kv_committed_len, and frees the decode slot past that length ad hoc; the "
        "over-allocation free then frees the same slot again",
        origin="sglang PR #12224 (explicit committed / allocated lengths); sglang-jax #982, #994",
    ),
    Fault(
        name="finish_skips_row_free",
        site="release_kv_cache (row step, finish path)",
        mechanism="a request that finishes in its prefill result (no decode step) has its slots freed but not "
        "its row: req_pool_idx stays set and the row never returns to the free list",
        origin="sglang #10871 (mixed-chunk finish leaked req_to_token_pool rows)",
    ),
    Fault(
        name="preempt_finished_double_free",
        site="ReferencePool.retract (finished-request filter)",
        mechanism="priority preemption drops the not-finished filter and runs release_req on a request that "
        "already finished and was released",
        origin="sglang #18694, #17797",
    ),
    Fault(
        name="unaligned_spec_alloc_len",
        site="ReferencePool.spec_prepare (next allocated length)",
        mechanism="the speculative prepare records kv_allocated_len = C + reserve without ceil_align while "
        "the paged allocator hands out whole pages, so the record disagrees with the pages it owns",
        origin="sglang #31616 (EAGLE with page_size > 1)",
    ),
    Fault(
        name="skip_overalloc_free_on_finish",
        site="release_kv_cache (over-allocation step, finish path)",
        mechanism="a finish path omits _release_overallocated_kv_indices, so the draft slots "
        "[ceil_align(C), A) are never freed",
        origin="sglang #19518 (spec v2 with decode KV offloading)",
    ),
    Fault(
        name="chunk_cache_skip_stash",
        site="ChunkCache.cache_unfinished_req",
        mechanism="skip_radix_cache_insert short-circuits the stash for ChunkCache too: prefix_indices is not "
        "updated between chunks, so the next chunk restarts at prefix 0 and re-allocates, and the first "
        "chunk's slots are never referenced or freed",
        origin="sglang #33996",
    ),
    Fault(
        name="double_lock_on_chunk_retry",
        site="ReferencePool._match_and_lock",
        mechanism="an admission takes its prefix lock twice (a rejected attempt's lock kept, then taken again "
        "on retry), so the matched nodes stay locked after the request releases",
        origin="sglang #20476",
    ),
    Fault(
        name="chunk_rematch_lock_leak",
        site="ReferencePool._open_extend (chunk continuation)",
        mechanism="a continuing chunked request re-matches its stashed prefix and locks that node again each "
        "round without releasing the previous lock",
        origin="sglang #1858 (mechanism not stated in the PR; hypothesis)",
    ),
    Fault(
        name="overalloc_free_unaligned_start",
        site="_release_overallocated_kv (start of the range)",
        mechanism="the over-allocation free starts at kv_committed_len without ceil_align, so the page it "
        "shares with the tail the finished path freed is freed by a second call",
        origin="sglang #6888 (available + evictable > total with page_size 16; hypothesis)",
    ),
    Fault(
        name="radix_counter_double_add",
        site="RadixCache.insert (evictable counter)",
        mechanism="an insert that extends a cached prefix adds its whole key to evictable_size_, counting "
        "the shared prefix twice",
        origin="sglang #35270",
    ),
    Fault(
        name="clear_zeroes_generations",
        site="ReqToTokenPool.clear (row generations)",
        mechanism="a flush zeroes req_generation, so the next request on a row gets a (row, generation) pair an "
        "earlier holder had, and a reader that stored the pair cannot tell the row was reused",
        origin="sglang 0.5.18 memory_pool.py ReqToTokenPool.clear; 0.5.23 keeps generations monotonic",
    ),
    Fault(
        name="stale_last_node_after_reset",
        site="ReferencePool._release (lock handle)",
        mechanism="the scheduler keeps a released request's last_node, so the handle outlives its lock and, "
        "after a flush, the tree it points into",
        origin="sglang #29291",
    ),
    Fault(
        name="skip_continuing_chunk_count",
        site="ReferencePool._extend_result (result branch)",
        mechanism="a continuing middle chunk is not counted in inflight_middle_chunks, so its result takes "
        "the normal branch and the request leaves prefill before its prompt is in KV",
        origin="sglang-jax #971",
    ),
    Fault(
        name="drop_chunked_without_release",
        site="ReferencePool.abort (mid-prefill branch)",
        mechanism="the chunked request leaves the scheduler without release_kv_cache: its row, slots and "
        "tree lock are never returned",
        origin="sglang-jax #1400 (problem 2)",
    ),
    Fault(
        name="double_free_within_group",
        site="ChunkCache.cache_finished_req",
        mechanism="the finished path lists the request's last slot twice in one free; the token allocator "
        "does not dedup, so the slot enters the free list twice",
        origin="vllm #42571 (SGLang analogue: one free group listing a slot twice)",
    ),
    Fault(
        name="release_order_row_first",
        site="release_kv_cache (order of the row step)",
        mechanism="the row goes back (req_pool_idx = None) before the over-allocation free, which reads the "
        "row through kv.req_pool_idx",
        origin="xllm #828 (SGLang analogue: release ordering)",
    ),
    Fault(
        name="lock_walk_off_by_one",
        site="RadixCache.inc_lock_ref",
        mechanism="the lock walk starts at node.parent, leaving the handle node unlocked and evictable while "
        "the request still reads it",
        origin="mini-sglang #52",
    ),
)

_OUT_OF_SCOPE = (
    Fault(
        name="session_retract_skips_overalloc_free",
        site="release_kv_cache (early return once a session took the row)",
        mechanism="a streaming-session retract returns before freeing [ceil_align(C), A)",
        origin="sglang #22151",
        in_scope=False,
        out_of_scope="needs streaming sessions (a SessionSlot taking the row on release)",
    ),
    Fault(
        name="mamba_slot_leak_on_reject",
        site="Scheduler (revert of a staged mamba slot when add_one_req rejects)",
        mechanism="a mamba slot staged by match_prefix is not freed when admission rejects the request",
        origin="sglang #16067, #15840",
        in_scope=False,
        out_of_scope="needs mamba slots (HybridReqToTokenPool)",
    ),
    Fault(
        name="encoder_decoder_last_loc_offset",
        site="alloc_for_decode (last_loc of encoder-decoder requests)",
        mechanism="decode derives last_loc from encoder-stripped seq_lens but writes at encoder_lens + seq_lens",
        origin="sglang #38840",
        in_scope=False,
        out_of_scope="needs encoder-decoder requests (encoder_lens offsets in the row)",
    ),
    Fault(
        name="pd_abort_frees_in_flight",
        site="PD decode abort (release while the transfer writes)",
        mechanism="an abort frees pages and row while the prefill-to-decode transfer still writes into them",
        origin="sglang #35049, #27372, #32564, #24580",
        in_scope=False,
        out_of_scope="needs a PD transfer in flight (pending writers per slot)",
    ),
    Fault(
        name="offload_frees_attended_prefix",
        site="DecodeKVCacheOffloadManager._release_finished_req",
        mechanism="the offload manager frees [0, prefill_len) while the request still attends to it",
        origin="sglang #24226",
        in_scope=False,
        out_of_scope="needs decode KV offloading with asynchronous readers",
    ),
    Fault(
        name="write_through_freed_row",
        site="deferred decode-KV sync (row generation check)",
        mechanism="a retracted request's lazily synced KV is written through its freed and reused row",
        origin="sglang #38179, #33547 (MLX)",
        in_scope=False,
        out_of_scope="needs overlap scheduling (a deferred writer holding a row and its generation)",
    ),
    Fault(
        name="retract_last_request_no_abort",
        site="ScheduleBatch.retract_decode (last request)",
        mechanism="the retraction loop asserts instead of aborting a last request that still does not fit",
        origin="sglang #14948",
        in_scope=False,
        out_of_scope="needs the scheduler's retract_decode loop and decode-memory check (the pool retracts "
        "only the request it is told to)",
    ),
    Fault(
        name="mamba_tombstone_lock_mismatch",
        site="MambaRadixCache.dec_lock_ref (skip_lock_node_ids)",
        mechanism="the unlock takes the mamba branch that the lock skipped on a tombstone",
        origin="sglang #27147, #21379",
        in_scope=False,
        out_of_scope="needs the mamba radix cache (tombstones and skip_lock_node_ids)",
    ),
    Fault(
        name="dllm_row_free_without_mark",
        site="dLLM FDFO stash (ReqToTokenPool.free without mark_kv_released)",
        mechanism="a resolved staging request's row is freed without mark_kv_released, so an abort in that "
        "window skips the release",
        origin="sglang 0.5.19 (observed hazard in the dLLM FDFO path)",
        in_scope=False,
        out_of_scope="the pool's dllm_stash already is this 0.5.19 behaviour, so no fixed path exists to switch "
        "from, and the model has no dLLM step",
    ),
    Fault(
        name="chunked_req_skipped_without_budget",
        site="PrefillAdder.add_chunked_req (early return)",
        mechanism="the chunked request is not added to can_run_list when the budget is exhausted",
        origin='sglang schedule_policy.py comment ("otherwise it will cause a memory leak")',
        in_scope=False,
        out_of_scope="needs PrefillAdder's token budget (the pool always schedules a continuation's chunk)",
    ),
    Fault(
        name="deferred_release_without_timeout",
        site="PD decode deferred release (ack or timeout)",
        mechanism="an abort while waiting for remote KV holds the blocks and never reclaims them",
        origin="vllm #32255, #46283",
        in_scope=False,
        out_of_scope="needs PD deferred release (abort while waiting for remote KV)",
    ),
)

PATTERNS: dict[str, Fault] = {f.name: f for f in (*_IN_SCOPE, *_OUT_OF_SCOPE)}
FAULTS: dict[str, Fault] = {name: f for name, f in PATTERNS.items() if f.in_scope}


class UnknownFault(ValueError):
    """A fault name that no switch carries."""


@dataclass(frozen=True)
class FaultSet:
    """The switches turned on for one pool; empty by default."""

    names: frozenset[str] = frozenset()

    @staticmethod
    def of(names: list[str] | tuple[str, ...] | frozenset[str]) -> FaultSet:
        unknown = sorted(set(names) - FAULTS.keys())
        if unknown:
            raise UnknownFault(_unknown_message(unknown))
        return FaultSet(frozenset(names))

    def on(self, name: str) -> bool:
        assert name in FAULTS, f"fault switch {name!r} is not registered"
        return name in self.names

    def sorted(self) -> list[str]:
        return sorted(self.names)


def _unknown_message(names: list[str]) -> str:
    """Why `names` are not switches: out of scope (with the reason) or not registered at all."""
    parts = [
        f"{n} is out of scope: {PATTERNS[n].out_of_scope}" if n in PATTERNS else f"unknown fault {n}" for n in names
    ]
    return "; ".join(parts) + f"; known: {', '.join(sorted(FAULTS))}"


NO_FAULTS = FaultSet()
