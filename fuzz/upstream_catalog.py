"""The upstream exam's mutants: bugs of the shapes SGLang shipped (`reference/sglang-kv-lifecycle.md` §8), each one
source edit of upstream's own lifecycle code, the fix taken back out: a line dropped, a bound or an offset put back.

Each names the file under the `sglang` package, the text as the release ships it (`original`: it must occur exactly
once there, else the mutant does not apply to that release), the text with the fix taken out, the pool shape the
walker hunts it on (`radix-p1:python` names the tree core as well) and the bug it has the shape of. The texts are
0.5.23's; `fuzz.upstream_mutants` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceMutant:
    name: str
    path: str
    original: str
    mutated: str
    pool: str
    shape: str


COMMON = "srt/mem_cache/common.py"
POOL = "srt/mem_cache/memory_pool.py"
ALLOCATION = "srt/mem_cache/allocation.py"
PAGED = "srt/mem_cache/allocator/paged.py"
BATCH = "srt/managers/schedule_batch.py"
UNIFIED = "srt/mem_cache/unified_radix_cache.py"
FULL = "srt/mem_cache/unified_cache/components/full.py"
DECODE = "srt/disaggregation/decode.py"
OFFLOAD = "srt/disaggregation/decode_kvcache_offload_manager.py"
SCHEDULER = "srt/managers/scheduler.py"
RESULT = "srt/managers/scheduler_components/batch_result_processor.py"
CHUNK_SIZER = "srt/managers/scheduler_components/dynamic_chunk_sizer.py"
POLICY = "srt/managers/schedule_policy.py"

_RELEASE = [
    SourceMutant(
        "release-keeps-lock",
        COMMON,
        "    tree_cache.unlock(req.lock)\n    req.lock = None\n",
        "    req.lock = None\n",
        "radix-p4",
        "a tree lock never dropped (#29291's family)",
    ),
    SourceMutant(
        "release-frees-prefix",
        COMMON,
        "tree_cache.free_kv_row(req.kv, [(req.kv.cache_protected_len, owned_kv_len)])",
        "tree_cache.free_kv_row(req.kv, [(0, owned_kv_len)])",
        "radix-p1",
        "a release that frees the tree's prefix again (two paths freeing different ranges)",
    ),
    SourceMutant(
        "release-keeps-draft-tail",
        COMMON,
        "    _release_overallocated_kv_indices(\n"
        "        req, owned_kv_len, req.kv.kv_allocated_len, tree_cache\n    )\n",
        "",
        "radix-p4",
        "#19518: [C, A) draft slots never freed",
    ),
    SourceMutant(
        "release-tail-unaligned",
        COMMON,
        "        start_p = ceil_align(start_p, page_size)\n",
        "        pass\n",
        "radix-p4",
        "#6888: a boundary page freed by two owners",
    ),
    SourceMutant(
        "release-keeps-allocated-len",
        COMMON,
        "    tree_cache.req_to_token_pool.free(req)\n    req.kv.mark_kv_released()\n",
        "    tree_cache.req_to_token_pool.free(req)\n",
        "chunk-p1",
        "#37167: a released record with stale lengths",
    ),
    SourceMutant(
        "stash-prefix-not-advanced",
        COMMON,
        "    req.prefix_len = req.extend_end\n\n",
        "\n",
        "chunk-p1",
        "#33996: the next chunk restarts at prefix 0 and re-allocates",
    ),
    SourceMutant(
        "retract-skips-release",
        BATCH,
        "    release_kv_cache(req, tree_cache, checkpoint=False)\n    # NOTE(lsyin)",
        "    # NOTE(lsyin)",
        "chunk-p1",
        "sglang-jax #1400: a request dropped without its release",
    ),
    SourceMutant(
        "retract-keeps-protected-len",
        BATCH,
        "        self.last_node = None\n        self.kv.cache_protected_len = 0\n",
        "        self.last_node = None\n",
        "radix-p4",
        "a retracted record re-admitted with a stale protected length",
    ),
]

_ROWS = [
    SourceMutant(
        "reuse-guard-dropped",
        POOL,
        "        assert all(reqs[i].kv.kv_allocated_len > 0 for i in reusing), (\n",
        "        assert True or all(reqs[i].kv.kv_allocated_len > 0 for i in reusing), (\n",
        "chunk-p1",
        "#37167: a stale row re-enters alloc unchecked",
    ),
    SourceMutant(
        "free-keeps-row-index",
        POOL,
        "        self.free_rows([req.kv.req_pool_idx])\n        req.kv.req_pool_idx = None\n",
        "        self.free_rows([req.kv.req_pool_idx])\n",
        "chunk-p1",
        "#37167's mutant: free leaves req_pool_idx in place",
    ),
    SourceMutant(
        "row-generation-not-bumped",
        POOL,
        "        self.req_generation[select_index] += 1\n",
        "",
        "chunk-p1",
        "#38179: a reused row that readers cannot tell from its last use",
    ),
    SourceMutant(
        "rows-from-the-wrong-end",
        POOL,
        "        select_index = self.free_slots[-need_size:]\n",
        "        select_index = self.free_slots[:need_size]\n",
        "chunk-p1",
        "two live requests on one row: rows handed out from one end, removed from the other",
    ),
    SourceMutant(
        "rows-freed-twice",
        POOL,
        "        self.free_slots.extend(indices)\n",
        "        self.free_slots.extend(indices)\n"
        "        self.free_slots.extend(indices[:1] if len(self.free_slots) % 3 == 0 else [])\n",
        "chunk-p1",
        "#18694: a row freed twice",
    ),
    SourceMutant(
        "decode-pool-generation-not-bumped",
        DECODE,
        "                self.req_generation[r.kv.req_pool_idx] += 1\n",
        "",
        "pd-p1",
        "the PD decode row pool's copy of the generation bump dropped",
    ),
    SourceMutant(
        "decode-pool-free-keeps-row-index",
        DECODE,
        "        self.free_slots.append(req.kv.req_pool_idx)\n        req.kv.req_pool_idx = None\n",
        "        self.free_slots.append(req.kv.req_pool_idx)\n",
        "pd-p1",
        "the PD decode row pool's free leaves req_pool_idx in place",
    ),
]

_SLOTS = [
    SourceMutant(
        "extend-allocated-len-unset",
        ALLOCATION,
        "        req.kv.kv_allocated_len = seq_len\n        req.kv.kv_committed_len = seq_len\n",
        "        req.kv.kv_committed_len = seq_len\n",
        "chunk-p1",
        "#12224: a release length not recorded",
    ),
    SourceMutant(
        "decode-allocated-len-unset",
        ALLOCATION,
        "        req.kv.kv_allocated_len += token_per_req\n        req.kv.kv_committed_len += token_per_req\n",
        "        req.kv.kv_committed_len += token_per_req\n",
        "chunk-p1",
        "#12224: committed past allocated",
    ),
    SourceMutant(
        "decode-writes-one-back",
        ALLOCATION,
        "        locs = seq_lens_gpu.clone()\n",
        "        locs = seq_lens_gpu.clone() - 1\n",
        "chunk-p4",
        "#38840: the decode writes at another offset than it allocated for",
    ),
    SourceMutant(
        "decode-last-loc-wrong",
        ALLOCATION,
        "            batch.req_pool_indices, seq_lens_gpu - 1\n        ]",
        "            batch.req_pool_indices, seq_lens_gpu - 2\n        ]",
        "chunk-p4",
        "#38840: last_loc from another offset than the write",
    ),
    SourceMutant(
        "extend-writes-overlap",
        ALLOCATION,
        "            pt += extend_len\n",
        "            pt += 0\n",
        "chunk-p1",
        "a batch's requests written the same slots",
    ),
    SourceMutant(
        "spec-reserve-unaligned",
        "srt/mem_cache/allocation_sizing.py",
        "            (r.kv.kv_committed_len + reserve + page_size - 1) // page_size * page_size,\n",
        "            r.kv.kv_committed_len + reserve,\n",
        "radix-p4",
        "#31616: an unaligned kv_allocated_len",
    ),
    SourceMutant(
        "spec-allocated-len-not-raised",
        ALLOCATION,
        "        req.kv.kv_allocated_len = max(req.kv.kv_allocated_len, nxt_kv_len)\n",
        "        pass\n",
        "radix-p4",
        "#31616's family: draft slots the record does not know",
    ),
    SourceMutant(
        "paged-free-not-deduplicated",
        PAGED,
        "            self._release_page_ids(torch.unique(free_index // self.page_size))\n",
        "            self._release_page_ids(free_index // self.page_size)\n",
        "chunk-p4",
        "vllm #42571: one page listed twice in one free",
    ),
    SourceMutant(
        "free-group-drops-a-free",
        PAGED,
        "            self._release_page_ids(torch.cat(self.free_page_ids_group))\n",
        "            self._release_page_ids(torch.cat(self.free_page_ids_group[1:] or "
        "[torch.empty(0, dtype=torch.int64)]))\n",
        "chunk-p4",
        "a free group's end that loses a request's frees",
    ),
    SourceMutant(
        "extend-tail-in-first-page",
        PAGED,
        "    page_idx3 = torch.clamp(end_new_pages_g - 1, min=0, max=free_pages.numel() - 1)\n",
        "    page_idx3 = torch.clamp(start_new_pages_g, min=0, max=free_pages.numel() - 1)\n",
        "chunk-p4",
        "a paged extend's tail written into another of its pages",
    ),
    SourceMutant(
        "decodes-share-a-new-page",
        PAGED,
        "    new_page_rank = (torch.cumsum(need_new_page, 0) - need_new_page).clamp_(\n",
        "    new_page_rank = (torch.cumsum(need_new_page, 0) * 0).clamp_(\n",
        "chunk-p4",
        "a batch's decodes handed one new page",
    ),
]

_TREE = [
    SourceMutant(
        "checkpoint-keeps-old-lock",
        UNIFIED,
        "        self.unlock(req.lock)\n        # Opt-in: leave",
        "        # Opt-in: leave",
        "radix-p4",
        "#1858/#20476: a lock taken again without the old one dropped",
    ),
    SourceMutant(
        "checkpoint-protected-len-stale",
        UNIFIED,
        "        req.kv.cache_protected_len = len(new_indices)\n        req.last_node = new_last_node\n",
        "        req.last_node = new_last_node\n",
        "radix-p4",
        "a stash that leaves the protected length behind",
    ),
    SourceMutant(
        "eviction-skips-a-free",
        UNIFIED,
        "            for indices in action.indices:\n"
        "                self.token_to_kv_pool_allocator.free_segment(indices, start_pos=0)\n",
        "            for indices in action.indices[1:]:\n"
        "                self.token_to_kv_pool_allocator.free_segment(indices, start_pos=0)\n",
        "radix-p1",
        "an evicted node's slots never freed",
    ),
    SourceMutant(
        "unlock-skips-evictable",
        FULL,
        "                self.tree_core.component_evictable_size_[ct] += key_len\n"
        "                self.tree_core.component_protected_size_[ct] -= key_len\n",
        "                self.tree_core.component_protected_size_[ct] -= key_len\n",
        "radix-p1:python",
        "#35270: the tree's counters no longer add up",
    ),
    SourceMutant(
        "split-drops-lock",
        FULL,
        "        new_parent.component_data[ct].lock_ref = child.component_data[ct].lock_ref\n",
        "        new_parent.component_data[ct].lock_ref = 0\n",
        "radix-p1:python",
        "#27147: a lock lost on a node split",
    ),
]

_PD = [
    SourceMutant(
        "prealloc-committed-short",
        DECODE,
        "        req.kv.kv_committed_len = fill_len\n",
        "        req.kv.kv_committed_len = max(fill_len - 1, 0)\n",
        "pd-p1",
        "#14's family: a pre-allocation that records less than it filled",
    ),
    SourceMutant(
        "offload-guard-dropped",
        OFFLOAD,
        "        if req.kv.req_pool_idx is None or req.kv.req_pool_idx == -1:\n"
        "            return\n\n        # Released only",
        "        # Released only",
        "chunk-p1",
        "#37167: the offload release runs again on a released record",
    ),
    SourceMutant(
        "offload-frees-prefix",
        OFFLOAD,
        "            req.kv, [(req.kv.cache_protected_len, req.kv.kv_allocated_len)]\n",
        "            req.kv, [(0, req.kv.kv_allocated_len)]\n",
        "radix-p4",
        "#24226: the offload release frees what the tree still holds",
    ),
    SourceMutant(
        "offload-keeps-lock",
        OFFLOAD,
        "        self.tree_cache.unlock(req.lock)\n        req.lock = None\n        self.req_to_token_pool.free(req)\n",
        "        req.lock = None\n        self.req_to_token_pool.free(req)\n",
        "radix-p4",
        "the offload release never drops the tree lock",
    ),
]

_BATCHES = [
    SourceMutant(
        "merge-swaps-rows",
        BATCH,
        "        self.req_pool_indices = torch.cat(\n"
        "            [self.req_pool_indices, other.req_pool_indices]\n        )\n",
        "        self.req_pool_indices = torch.cat(\n"
        "            [other.req_pool_indices, self.req_pool_indices]\n        )\n",
        "chunk-p1",
        "a running batch whose rows no longer line up with its requests",
    ),
    SourceMutant(
        "filter-keeps-stale-rows",
        BATCH,
        "        self.req_pool_indices = self.req_pool_indices[keep_indices_device]\n",
        "",
        "chunk-p1",
        "#18694's family: a filtered batch that still lists the rows of the requests it dropped",
    ),
    SourceMutant(
        "eviction-short-by-one",
        "srt/mem_cache/allocator/base.py",
        "        shortfall = num_tokens - self.available_size()\n",
        "        shortfall = num_tokens - self.available_size() - 1\n",
        "radix-p1",
        "an allocation that evicts one token too few and refuses what fits",
    ),
    SourceMutant(
        "flush-loses-a-row",
        POOL,
        "    def clear(self):\n        self.free_slots = list(range(1, self._alloc_size))\n",
        "    def clear(self):\n        self.free_slots = list(range(1, self._alloc_size - 1))\n",
        "chunk-p1",
        "a flush that leaks a row",
    ),
    SourceMutant(
        "flush-loses-a-page",
        PAGED,
        "        self.free_pages = torch.arange(\n            1, self.num_pages + 1,",
        "        self.free_pages = torch.arange(\n            1, self.num_pages,",
        "chunk-p4",
        "a flush that leaks a page",
    ),
]

# The scheduler's own methods around the pools (`impl.upstream.scheduler_host` runs them). Not here: an aborted
# chunked request released with `checkpoint=True`; the model stashes a chunk (`cache_unfinished_req`) in the
# step that computes it, so at any abort the tree already keys all the request holds and the mutant is
# equivalent under the flows drawn (the window before `stash_chunked_request` is not drawn yet).
_SCHEDULER = [
    SourceMutant(
        "flush-while-chunked",
        SCHEDULER,
        "            and self.chunked_req is None\n            and not self.dllm_manager.any_staging_reqs()\n",
        "            and not self.dllm_manager.any_staging_reqs()\n",
        "chunk-p1",
        "a flush taken as idle while a request is mid-prefill: its row and slots wiped under it",
    ),
    SourceMutant(
        "chunked-abort-still-chunked",
        SCHEDULER,
        "        self.chunked_req = None\n        self._pending_chunked_abort_req = None\n        # A client",
        "        self._pending_chunked_abort_req = None\n        # A client",
        "chunk-p1",
        "an aborted chunked request released but left as the chunked request, its next chunk launched",
    ),
    SourceMutant(
        "running-abort-never-finishes",
        SCHEDULER,
        "                else:\n                    req.to_finish = FINISH_ABORT()\n",
        "                else:\n                    pass\n",
        "chunk-p1",
        "an abort of a running request that never sets `to_finish`: the request runs on, its KV never released",
    ),
    SourceMutant(
        "finish-length-off-by-one",
        BATCH,
        "        if len(self.output_ids) >= self.sampling_params.max_new_tokens:\n",
        "        if len(self.output_ids) > self.sampling_params.max_new_tokens:\n",
        "chunk-p1",
        "a length cap checked one token late: the finish and its release a step behind",
    ),
    SourceMutant(
        "finish-never-released",
        RESULT,
        "                release_kv_cache(req, self.tree_cache, checkpoint=checkpoint)\n",
        "                pass\n",
        "chunk-p1",
        "a finished request whose release the result pass skips (#29291's family: KV held past the finish)",
    ),
    SourceMutant(
        "finish-not-checkpointed",
        RESULT,
        "                    else True\n                )\n                release_kv_cache(",
        "                    else False\n                )\n                release_kv_cache(",
        "radix-p1",
        "a finished request released without its tree insert: the prefix cache loses what it should keep",
    ),
    SourceMutant(
        "decode-pass-group-left-open",
        RESULT,
        "        self.output_streamer.stream_output(batch.reqs, batch.return_logprob)\n"
        "        self.token_to_kv_pool_allocator.free_group_end()\n",
        "        self.output_streamer.stream_output(batch.reqs, batch.return_logprob)\n",
        "chunk-p1",
        "a decode result pass that never closes its free group: the frees of every finish in it deferred forever",
    ),
]

# `process_batch_result_prefill` and the chunked request's stash (`Scheduler.stash_chunked_request`), run after
# every prefill batch outside the harness's own open free group.
_PREFILL_RESULT = [
    SourceMutant(
        "prefill-pass-skips-checkpoint",
        RESULT,
        "                    elif not batch.decoding_reqs or req not in batch.decoding_reqs:\n"
        "                        checkpoint_kv_cache(req, self.tree_cache)\n",
        "                    elif not batch.decoding_reqs or req not in batch.decoding_reqs:\n"
        "                        pass\n",
        "radix-p1",
        "a finished prefill whose result pass skips the checkpoint: the prompt never reaches the tree, and the "
        "request's prefix is not what its next step reads",
    ),
    SourceMutant(
        "prefill-middle-chunk-kept",
        RESULT,
        "                    # being chunked reqs' prefill is not finished\n"
        "                    req.inflight_middle_chunks -= 1\n                    # There is only",
        "                    # being chunked reqs' prefill is not finished\n                    # There is only",
        "chunk-p1",
        "a middle chunk's count never taken back: the request's last chunk is taken for a middle one, its prefill "
        "never finishes in the pass",
    ),
    SourceMutant(
        "prefill-pass-group-left-open",
        RESULT,
        "                    req.time_stats.set_last_chunked_prefill_finish_time()\n\n"
        "        self.token_to_kv_pool_allocator.free_group_end()\n",
        "                    req.time_stats.set_last_chunked_prefill_finish_time()\n\n",
        "chunk-p1",
        "a prefill result pass that never closes its free group: every later free deferred",
    ),
    SourceMutant(
        "chunked-stash-skipped",
        SCHEDULER,
        "        else:\n            checkpoint_kv_cache(req, self.tree_cache)\n\n    def process_pending_chunked_abort",
        "        else:\n            pass\n\n    def process_pending_chunked_abort",
        "chunk-p1",
        "a chunked request not stashed between chunks (#33996's shape): its next chunk planned from a stale prefix",
    ),
]

# The prefill round: `Scheduler.get_new_batch_prefill` and its `PrefillAdder`, run by the `prefill_round` step.
_PREFILL_ROUND = [
    SourceMutant(
        "round-chunked-left-out",
        POLICY,
        "        req.extend_end = req.prefix_len + new_len\n        self.can_run_list.append(req)\n"
        "        self._update_prefill_budget(\n",
        "        req.extend_end = req.prefix_len + new_len\n        self._update_prefill_budget(\n",
        "chunk-p1",
        'the chunked request planned but left out of the batch ("otherwise it will cause a memory leak"): its '
        "row and chunk are held by a request no batch runs",
    ),
    SourceMutant(
        "round-planning-lock-kept",
        POLICY,
        "                self.tree_cache.unlock(lock)\n        finally:\n",
        "                pass\n        finally:\n",
        "radix-p1",
        "the adder's planning lock on a matched prefix never given back (a tree lock never dropped)",
    ),
    SourceMutant(
        "round-admission-unlocked",
        POLICY,
        "        req.lock = self.tree_cache.lock(req.last_node)\n        self.can_run_list.append(req)\n",
        "        self.can_run_list.append(req)\n",
        "radix-p1",
        "an admission that takes no lock on its matched prefix: the tree may evict what the request reads",
    ),
    SourceMutant(
        "round-queue-keeps-admitted",
        SCHEDULER,
        "        self.waiting_queue = [x for x in self.waiting_queue if x not in can_run_set]\n",
        "",
        "chunk-p1",
        "a request the round admitted left in the waiting queue: admitted again on a second row",
    ),
    SourceMutant(
        "round-middle-chunk-unmarked",
        SCHEDULER,
        "        if self.chunked_req is not None:\n            self.chunked_req.inflight_middle_chunks += 1\n",
        "",
        "chunk-p1",
        "a middle chunk not counted: its result pass takes the chunk for the whole prefill",
    ),
]

# Priority preemption in the prefill round (`PrefillAdder.preempt_to_schedule`), hunted on roomy-p1.
_PREEMPTION = [
    SourceMutant(
        "preempt-finished-released-again",
        POLICY,
        "            if r not in self.preempt_list and not r.finished()\n",
        "            if r not in self.preempt_list\n",
        "roomy-p1",
        "#18694: preemption walks a running batch that still lists requests finished this round, and releases "
        "them again",
    ),
    SourceMutant(
        "preempt-left-running",
        POLICY,
        "        self.running_batch.filter_batch(keep_indices=keep_indices)\n        self.preempt_list.extend(",
        "        self.preempt_list.extend(",
        "roomy-p1",
        "a preempted request released but left in the running batch: it decodes on with no row",
    ),
    SourceMutant(
        "preempt-not-requeued",
        SCHEDULER,
        "        if adder.preempt_list:\n            for req in adder.preempt_list:\n"
        "                self._add_request_to_queue(req)\n",
        "",
        "roomy-p1",
        "a preempted request released and never queued again: it is lost",
    ),
]

# `ScheduleBatch.retract_decode`, run on the running batch by the decode retraction step.
_RETRACTION = [
    SourceMutant(
        "retract-order-reversed",
        BATCH,
        "            key=lambda i: length_key(reqs[i]),\n            reverse=True,\n",
        "            key=lambda i: length_key(reqs[i]),\n            reverse=False,\n",
        "chunk-p1",
        "a retraction that pops the request it most prefers to keep (the most outputs, the shortest prompt)",
    ),
    SourceMutant(
        "retract-keeps-none",
        BATCH,
        "            if len(sorted_indices) == 1:\n"
        "                # Always keep at least one request\n                break\n",
        "            if not sorted_indices:\n                break\n",
        "chunk-p1",
        "a retraction that takes the whole running batch, the last request too (the keep-one guard dropped)",
    ),
    SourceMutant(
        "retract-stops-after-one",
        BATCH,
        "        while first_iter or (\n"
        "            not self.check_decode_mem(selected_indices=sorted_indices)\n        ):\n",
        "        while first_iter:\n",
        "busy-p1",
        "a retraction that stops after one request although the rest still do not fit the next decode",
    ),
    SourceMutant(
        "retract-last-not-aborted",
        BATCH,
        "        if len(sorted_indices) <= 1 and not self.check_decode_mem(\n",
        "        if False and not self.check_decode_mem(\n",
        "busy-p1",
        "#14948's shape: the last request kept though even alone it cannot fit (the decode then fails)",
    ),
]

# `Scheduler.update_running_batch`, run on the running batch by the decode round.
_ROUND = [
    SourceMutant(
        "round-keeps-finished",
        SCHEDULER,
        "        batch.filter_batch(reqs_to_exclude=finishing_reqs)\n",
        "        pass\n",
        "chunk-p1",
        "a decode round without its filter: requests that finished and were released last round decode again",
    ),
    SourceMutant(
        "round-retracted-not-queued",
        SCHEDULER,
        "            for req in retracted_reqs:\n                self._add_request_to_queue(req, is_retracted=True)\n",
        "            pass\n",
        "busy-p1",
        "retracted requests dropped by the scheduler: their KV given back, never re-queued, never answered",
    ),
    SourceMutant(
        "round-never-retracts",
        SCHEDULER,
        "        if kv_full_retract_flag or (\n            TEST_RETRACT and",
        "        if (\n            TEST_RETRACT and",
        "busy-p1",
        "a decode round that ignores its own memory check: the decode's allocation fails instead of a retraction",
    ),
    SourceMutant(
        "round-always-retracts",
        SCHEDULER,
        "        kv_full_retract_flag = not batch.check_decode_mem()\n",
        "        kv_full_retract_flag = True\n",
        "chunk-p1",
        "a decode round that retracts though the batch fits (the test-only retraction left on)",
    ),
]

# `Scheduler.pause_generation(mode="retract")`, run by the retract-mode pause.
_PAUSE = [
    SourceMutant(
        "pause-retracts-finished",
        SCHEDULER,
        "        retract_reqs = [r for r in self.running_batch.reqs if not r.finished()]\n",
        "        retract_reqs = list(self.running_batch.reqs)\n",
        "chunk-p1",
        "#18694's shape in the pause: a request that finished this round, still in the running batch, retracted "
        "(released) again",
    ),
    SourceMutant(
        "pause-skips-chunked",
        SCHEDULER,
        "            retract_reqs.append(self.chunked_req)\n",
        "            pass\n",
        "chunk-p1",
        "a weight-update pause that forgets the chunked request: dropped from the scheduler with its row and KV",
    ),
    SourceMutant(
        "pause-not-requeued",
        SCHEDULER,
        "            else:\n                self._add_request_to_queue(req)\n"
        "        self.running_batch.batch_is_full = False\n",
        "            else:\n                pass\n        self.running_batch.batch_is_full = False\n",
        "chunk-p1",
        "a pause that retracts the running requests and never re-queues them: they never resume",
    ),
    SourceMutant(
        "pause-keeps-chunked",
        SCHEDULER,
        "            self.chunked_req = None\n\n        # Surface the paused state",
        "            pass\n\n        # Surface the paused state",
        "chunk-p1",
        "a pause that retracts the chunked request but leaves it the scheduler's chunked request: queued and "
        "mid-prefill at once",
    ),
]

_FINISHES = [
    SourceMutant(
        "stop-token-ignored",
        BATCH,
        "                matched_eos |= token_id in self.sampling_params.stop_token_ids\n",
        "                pass\n",
        "chunk-p1",
        "a finish check that never matches the sampling params' stop tokens: the request decodes on past its stop",
    ),
    SourceMutant(
        "eos-ignored",
        BATCH,
        "                matched_eos |= token_id in self.eos_token_ids\n",
        "                pass\n",
        "chunk-p1",
        "a finish check that never matches the request's EOS ids",
    ),
    SourceMutant(
        "stop-len-past-stop",
        BATCH,
        "                self.finished_len = matched_pos + 1\n",
        "                self.finished_len = matched_pos + 2\n",
        "spec-p1",
        "a stop token's `finished_len` one past the stop: the release keys a token the client never saw",
    ),
    SourceMutant(
        "stop-str-unlocated",
        BATCH,
        "                        if stop_str_in_tail:\n"
        "                            self.finished_len = self._locate_str_stop_finished_len(\n",
        "                        if stop_str_in_tail:\n"
        "                            _ = self._locate_str_stop_finished_len(\n",
        "spec-p1",
        "a stop string matched but not located: `finished_len` unset, the verified run past it kept whole",
    ),
    SourceMutant(
        "stop-tail-owned",
        BATCH,
        "        if self.finished_len is None:\n            return self.kv.kv_committed_len\n",
        "        if True:\n            return self.kv.kv_committed_len\n",
        "spec-p1",
        "0.5.22's cut taken back out: `owned_kv_len()` ignores `finished_len`, the run past a stop is cached",
    ),
    SourceMutant(
        "pp-profile-keeps-kv",
        CHUNK_SIZER,
        "                release_kv_cache(req, self.tree_cache, checkpoint=False)\n",
        "                pass\n",
        "chunk-p1",
        "PP profiling's synthetic requests never released: their rows and slots held from server start",
    ),
    SourceMutant(
        "checkpoint-past-owned",
        COMMON,
        "        tree_cache.checkpoint(req, up_to=owned_kv_len)\n",
        "        tree_cache.checkpoint(req, up_to=req.kv.kv_committed_len)\n",
        "spec-p1",
        "two halves of one release keyed on different lengths: the tree takes the run past the stop, which the "
        "over-allocation free then frees under it",
    ),
]

# The failure paths: what upstream does when a call inside it fails, hunted with fault plans (`+faults`).
_FAILURES = [
    SourceMutant(
        "extend-aux-rollback-dropped",
        ALLOCATION,
        "            target_seq_lens_cpu=batch.seq_lens_cpu,\n        )\n    except Exception:\n"
        "        batch.tree_cache.token_to_kv_pool_allocator.free(out_cache_loc)\n        raise\n",
        "            target_seq_lens_cpu=batch.seq_lens_cpu,\n        )\n    except Exception:\n        raise\n",
        "chunk-p1+faults",
        "a second allocation inside alloc_for_extend fails after the first succeeded, and its slots are never "
        "given back",
    ),
    SourceMutant(
        "decode-aux-rollback-dropped",
        ALLOCATION,
        "            target_seq_lens_cpu=batch.seq_lens_cpu + token_per_req,\n        )\n    except Exception:\n"
        "        batch.tree_cache.token_to_kv_pool_allocator.free(out_cache_loc)\n        raise\n",
        "            target_seq_lens_cpu=batch.seq_lens_cpu + token_per_req,\n        )\n    except Exception:\n"
        "        raise\n",
        "chunk-p1+faults",
        "a decode's aux allocation fails after its slots were taken, and they are never given back",
    ),
    SourceMutant(
        "token-alloc-failure-silent",
        ALLOCATION,
        "        raise RuntimeError(error_msg)\n\n    return out_cache_loc\n\n\ndef alloc_paged_token_slots_extend(",
        "\n    return out_cache_loc\n\n\ndef alloc_paged_token_slots_extend(",
        "chunk-p1+faults",
        "an allocation that came back empty not reported: the caller goes on with no slots",
    ),
    SourceMutant(
        "prealloc-row-unchecked",
        DECODE,
        "        assert req_pool_indices is not None, (\n"
        '            "req_pool_indices is full! There is a bug in memory estimation."\n        )\n',
        "",
        "pd-p1+faults",
        "a PD pre-allocation that finds no free row goes on without one",
    ),
]

MUTANTS: tuple[SourceMutant, ...] = (
    *_RELEASE,
    *_ROWS,
    *_SLOTS,
    *_TREE,
    *_PD,
    *_BATCHES,
    *_SCHEDULER,
    *_PREFILL_RESULT,
    *_PREFILL_ROUND,
    *_PREEMPTION,
    *_RETRACTION,
    *_ROUND,
    *_PAUSE,
    *_FAILURES,
    *_FINISHES,
)
