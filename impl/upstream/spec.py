"""Speculative (EAGLE) decoding on upstream's classes: the over-allocation of draft slots and the commit of the
accepted tokens, inside the process-wide config an EAGLE server publishes.

A speculative pool runs every call inside `overrides` (`get_spec()` as EAGLE, `get_schedule()` at the pool's page
size): upstream's release reads that config, and outside it `_release_overallocated_kv_indices` asserts on the
over-allocated tail `[C, A)`. A prepare takes `A = max(A, ceil_align(C + reserve))`. EAGLE reserves
`2 * max(num_steps * topk, num_draft_tokens)` per decode (`get_alloc_reserve_per_decode`), always even, so an even
reserve runs the whole `eagle_prepare_for_decode(batch)` under a config that reserves exactly that; an odd one,
which no EAGLE config reserves, calls the unit it ends in, `alloc_for_spec_decode`, with the lengths that formula
gives. The commit is the result processor's `kv_committed_len += accepted` with the accepted tokens appended, and
the verify step's `seq_lens += accepted` on the request's batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from impl.records import ReqStatus, output_token
from impl.scheduler import tokens_needed
from impl.target import PoolConfig, Refused

if TYPE_CHECKING:
    from impl.upstream.target import SglangPool

# What the EAGLE server runs with; a prepare narrows steps and draft tokens to reserve what it is asked.
EAGLE = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
# The batch fields the verify step advances by the accepted tokens (those the next decode's allocation reads).
SEQ_LEN_FIELDS = ("seq_lens", "seq_lens_cpu", "orig_seq_lens")


@contextlib.contextmanager
def overrides(config: PoolConfig) -> Iterator[None]:
    """The config an EAGLE server publishes, for a speculative pool; nothing for another."""
    if not config.speculative:
        yield
        return
    from sglang.srt.runtime_context import get_schedule, get_spec

    with get_spec().override(**EAGLE), get_schedule().override(page_size=config.page_size):
        yield


def next_allocated_len(committed_len: int, allocated_len: int, reserve: int, page_size: int) -> int:
    """Upstream's prepare length: `max(A, ceil_align(C + reserve))` (`page_aligned_decode_alloc_lens`)."""
    want = (committed_len + reserve + page_size - 1) // page_size * page_size
    return max(allocated_len, want)


def prepare(batch: Any, reserve: int, lens: tuple[int, int]) -> None:
    """Over-allocate `reserve` draft slots for the one request of `batch`, whose (committed, allocated) lengths
    are `lens`: `eagle_prepare_for_decode` where an EAGLE config reserves that many, else `alloc_for_spec_decode`."""
    if reserve % 2 == 0:
        from sglang.srt.runtime_context import get_spec
        from sglang.srt.speculative.eagle_utils import eagle_prepare_for_decode

        # topk 1: the reserve is 2 * max(num_steps, num_draft_tokens).
        with get_spec().override(speculative_num_steps=reserve // 2, speculative_num_draft_tokens=reserve // 2):
            eagle_prepare_for_decode(batch)
        return
    _alloc_for_spec_decode(batch, reserve, lens)


def _alloc_for_spec_decode(batch: Any, reserve: int, lens: tuple[int, int]) -> None:
    from sglang.srt.mem_cache.allocation import alloc_for_spec_decode

    committed_len, allocated_len = lens
    page_size = batch.token_to_kv_pool_allocator.page_size
    nxt = next_allocated_len(committed_len, allocated_len, reserve, page_size)
    cur_cpu = torch.tensor([allocated_len], dtype=torch.int32)
    nxt_cpu = torch.tensor([nxt], dtype=torch.int32)
    alloc_for_spec_decode(
        batch.tree_cache,
        batch.req_to_token_pool,
        reqs=batch.reqs,
        req_pool_indices=batch.req_pool_indices,
        cur_kv_lens=cur_cpu.to(batch.device),
        cur_kv_lens_cpu=cur_cpu,
        nxt_kv_lens=nxt_cpu.to(batch.device),
        nxt_kv_lens_cpu=nxt_cpu,
        num_needed_tokens=nxt - allocated_len,
        batch=batch,
    )


def advance_batch(batch: Any, accepted: int) -> None:
    """The verify step's bookkeeping: the batch's sequence lengths move past the accepted tokens."""
    for name in SEQ_LEN_FIELDS:
        value = getattr(batch, name, None)
        if value is not None:
            setattr(batch, name, value + accepted)


def spec_prepare(pool: SglangPool, rid: int, reserve: int) -> None:
    """The speculative prepare of one decoding request on its own running batch, refused as the reference
    refuses it (speculative decoding off, a reserve below 1, past the row width, out of slots)."""
    if not pool.config.speculative:
        raise Refused("speculative decoding is off in this pool")
    if reserve < 1:
        raise Refused(f"reserve must be positive, got {reserve}")
    entry = pool._ready_to_decode(rid)
    view = pool._view(entry)
    page_size, lens = pool.config.page_size, (view.committed_len, view.allocated_len)
    nxt = next_allocated_len(*lens, reserve, page_size)
    if nxt > pool.config.width:
        raise Refused(f"request {rid} would reserve past the row width {pool.config.width}")
    pool._check_capacity(0, tokens_needed(page_size, view.allocated_len, nxt))
    if nxt > view.allocated_len:
        running = pool.dialect.merge_batches([entry.batch])
        pool._upstream(lambda: prepare(running, reserve, lens))
        entry.batch = pool.dialect.split_batch(running, 0)
    entry.status = ReqStatus.DECODING


def spec_commit(pool: SglangPool, rid: int, accepted: int) -> None:
    """The verify result of one decoding request: `C += accepted` inside its reserved `[C, A)`."""
    entry = pool._get(rid)
    view = pool._view(entry)
    if entry.status is not ReqStatus.DECODING or view.row is None:
        raise Refused(f"request {rid} is not decoding on a row")
    room = view.allocated_len - view.committed_len
    if not 1 <= accepted <= room:
        raise Refused(f"{accepted} accepted tokens do not fit the {room} reserved")
    start = view.committed_len
    pool.dialect.set_committed_len(entry.req, start + accepted)
    entry.req.output_ids.extend(output_token(rid, p) for p in range(start, start + accepted))
    advance_batch(entry.batch, accepted)
