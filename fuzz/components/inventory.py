"""Every public member of each driven class (upstream 0.5.23 and 0.5.18, and the reference's counterparts), and
how the component lockstep drives it or why it cannot matter to the lifecycle contract.

An entry that starts with an event name is driven by that event; "observed" is read after every event; anything
else says why it is not driven. `undocumented` names the public members of a class that have no entry, so a new
method in a later sglang fails a test instead of going unnoticed.
"""

from __future__ import annotations

import inspect

_ROW_POOL = {
    "alloc": "RowAlloc (new, re-admitted and reusing requests, batches of 1-5); RowAllocStale (forbidden: a released "
    "record that still names a row)",
    "alloc_rows": "RowAllocRows (0 to one past the free rows)",
    "free": "RowFree, RowStale (a free, then the record left naming its row); RowFreeRowless (forbidden)",
    "free_rows": "RowFreeRows (part or all of an alloc_rows block)",
    "clear": "RowClear (with rows held: every holder retired)",
    "available_size": "observed after every event",
    "write": "RowWrite (positions of a held row; the whole req_to_token table observed after every event)",
    "register_on_alloc_rows": "registered when the unit is built; the rows each hand-out reports are observed",
    "reset_aux_cache_allocator": "RowQuery (no aux cache: must change nothing)",
    "schedulable_token_capacity": "RowQuery (no aux cache: answers its argument)",
    "alloc_aux_to_lengths": "RowQuery (no aux cache: must change nothing)",
    "attach_aux_cache": "not driven: attaches a mamba / hisparse aux cache, which a full-attention pool has none of; "
    "without one, free_rows, clear and reset_aux_cache_allocator skip it",
    "enable_mamba_extra_buffer_lazy": "not driven: a class flag (False) only the mamba pools read",
    "pre_alloc_size": "not driven: a class constant (0) for this pool; DecodeReqToTokenPool's pre-allocation rows",
}

_ALLOCATOR = {
    "alloc": "Alloc (0 to one page past the free ones), Fill (all but 0-2 of them); Extend and Decode at page size 1 "
    "(one alloc per batch)",
    "alloc_extend": "Extend (batches of 1-5 requests, new and continuing, with and without num_new_pages); page "
    "size 1: not driven, the base raises NotImplementedError and the scheduler allocates through alloc",
    "alloc_decode": "Decode (batches of 1-5 requests); page size 1: not driven, as alloc_extend",
    "free": "Free (a holder's positions from any start), FreeEmpty",
    "free_full": "Free, FreeEmpty (a plain free here: a single pool has no SWA peer)",
    "free_segment": "Free, FreeEmpty; BadSegment (forbidden where segments start on a page)",
    "free_full_segment": "Free, FreeEmpty; BadSegment (forbidden where segments start on a page)",
    "free_page_ids": "Free (the pages of a holder's positions from a start), FreeEmpty",
    "free_segments": "FreeSplit (two segments of one row), FreeEmpty; BadSplit (forbidden where neighbours may not "
    "share a page)",
    "free_full_segments": "FreeSplit, FreeEmpty; BadSplit",
    "free_group_begin": "GroupBegin (inside an open group: forbidden where the contract says so)",
    "free_group_end": "GroupEnd (with no group open: must change nothing where the contract says so)",
    "merge_and_sort_free": "Merge; also what an allocation short of free pages does under need_sort",
    "clear": "Clear (with pages held and a group open)",
    "resize": "Resize (a clear at 1 to twice the built number of pages)",
    "available_size": "observed after every event",
    "pending_pages": "observed after every event (the pages an open free group holds back)",
    "size_full": "Query (the size the allocator was built or resized to)",
    "get_all_free_pages": "Query (free and staged pages, as the model has them)",
    "check_decode_capacity": "Query (no tree cache: available_size() >= num_tokens)",
    "request_slot_reserve": "Query (a static pool reserves nothing: 0)",
    "get_extend_allocation_demand": "Query (a static pool's demand is the conservative count it is given)",
    "evict_to_free_tokens": "Query (no tree cache: returns None and changes nothing)",
    "verify_byte_accounting": "Query (a static pool has no byte model: [])",
    "mamba_full_cache_donor": "Query (None: no shared-pool donor)",
    "debug_print": "Query ('')",
    "get_kvcache": "Query (the kvcache it was built with: None)",
    "translate_kv_indices_for_transfer": "Query (identity on a static pool)",
    "prealloc_fits_assumes_reclaim": "Query (False)",
    "prealloc_ceiling_fits": "Query (None: no ceiling of its own)",
    "prealloc_fits": "Query (full tokens within the budget it is given)",
    "set_hicache_transfer_done_event": "Query (a static pool records nothing: None)",
    "create_prefill_budget": "not driven: builds the scheduler's PrefillBudget over a tree cache; it reads "
    "available_size and changes no allocator state",
    "max_new_tokens_for_memory": "not driven: arithmetic of its arguments and page_size; reads no allocator state",
    "get_cpu_copy": "not driven: copies KV contents through the kvcache (None here), not allocation state",
    "load_cpu_copy": "not driven: as get_cpu_copy",
}

INVENTORY: dict[str, dict[str, str]] = {
    "ReqToTokenPool": _ROW_POOL,
    "DecodeReqToTokenPool": _ROW_POOL,
    "TokenToKVPoolAllocator": _ALLOCATOR,
    "PagedTokenToKVPoolAllocator": _ALLOCATOR,
}


def public_members(cls: type) -> list[str]:
    """The public names a class has (its own and inherited methods, properties and class attributes)."""
    return sorted(name for name, _ in inspect.getmembers(cls) if not name.startswith("_"))


def undocumented(cls: type) -> list[str]:
    """Public members of `cls` without an inventory entry for its class name."""
    entries = INVENTORY[cls.__name__]
    return [name for name in public_members(cls) if name not in entries]
