"""Every instance field of the upstream classes the target drives, and what reads it or why nothing needs to.

Issue #15 ("see what upstream sees"): for each class `impl.upstream.target.SglangPool` builds or drives, every
field an instance holds (`vars(obj)`, or `__slots__`) on a supported version, mapped to one `Entry`: `observed`
(the snapshot field, observation or invariant that reads it), `configured` (the value the target builds it with),
`irrelevant` (why it cannot matter to the lifecycle contract) or `not read` (it matters and nothing reads it).
An entry marked `kept` is argued never set on these pools: `tests/upstream/test_field_inventory.py` checks that it
keeps its initial value through a lifecycle on every shape, and that the instances hold exactly these fields.
`upstream/field_table.py` writes the table into `docs/upstream-api.md` §13. Data only: no sglang, no harness.

Decisions: a field that is a reference to another driven object (the batch's `req_to_token_pool`) is `configured`
(the object the target built); a field whose only reader is upstream code whose effect lands in an observed field
(a batch's `seq_lens`, written into `req_to_token` and the record) is `irrelevant`, saying where the effect shows.
Classes are named as `type(obj).__name__` names them; the Rust tree core is its Python adapter
(`RustUnifiedTreeCore`), whose tree lives behind `_binding` and shows no fields of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

VERSIONS = ("0.5.18", "0.5.23")
KINDS = ("observed", "configured", "irrelevant", "not read")


@dataclass(frozen=True)
class Entry:
    """One field's line: its kind, the reason, and whether it is argued to keep its initial value (`kept`)."""

    kind: str
    why: str
    kept: bool = False

    @property
    def line(self) -> str:
        return f"{self.kind}: {self.why}" + (" (kept: checked)" if self.kept else "")


def observed(where: str) -> Entry:
    return Entry("observed", where)


def configured(value: str, kept: bool = True) -> Entry:
    """A value the target builds the object with; `kept` False where the target or its glue writes it later."""
    return Entry("configured", value, kept)


def irrelevant(why: str) -> Entry:
    return Entry("irrelevant", why)


def unset(why: str) -> Entry:
    """Irrelevant because a full-attention single-rank CPU pool never sets it: checked to keep its initial value."""
    return Entry("irrelevant", f"never set: {why}", kept=True)


def not_read(why: str) -> Entry:
    return Entry("not read", why)


# -- shared observations -----------------------------------------------------------------------------------

ROW = observed("RecordView.row -> observe, row-owner, row-exclusive, live-row-owned, released-rowless")
COMMITTED = observed("RecordView.committed_len -> observe, length-order, prefill-shape")
PROTECTED = observed("RecordView.protected_len -> observe, protected-pages, chunk-unprotected, eviction rules")
ALLOCATED = observed("RecordView.allocated_len -> observe, no-overallocation, released-unallocated, row_slots")
PREFIX = observed("RecordView.prefix_len -> lock-follows-prefix, prefill-shape")
EXTEND_END = observed("RecordView.extend_end -> prefill-shape")
LOCK = observed("RecordView.tree_locked (Dialect.tree_locked) -> tree-lock-holders, lock-follows-prefix")
TOKENS = observed(
    "the request's tokens: SglangPool._peek_match and _known_len -> the admission's match, judged by the model"
)
FILL = observed(
    "the extend's tokens (init_next_round_input: origin_input_ids + output_ids), the match key and extend length; "
    "their effect is RecordView.committed_len and PoolSnapshot.tree_slots"
)
FREE_ROWS = observed("PoolSnapshot.free_rows -> row-conservation, row-held-by-owner, observe")
GENERATION = observed("PoolSnapshot.row_generation -> the generation ledger (properties/generations.py), observe")
REQ_TO_TOKEN = observed("PoolSnapshot.req_to_token and row_slots -> page-ownership, the page check")
FREE_PAGES = observed("PoolSnapshot.free_slots -> token-conservation, page-ownership, observe")
RELEASE_PAGES = observed("PoolSnapshot.release_slots -> token-conservation, page-ownership, observe")
GROUP = observed("PoolSnapshot.group_open / pending_pages (Dialect.free_group) -> free-group, observe")
EVICTABLE = observed("PoolSnapshot.evictable_size (evictable_size()) -> tree-counters, observe")
PROTECTED_SIZE = observed("PoolSnapshot.protected_size (protected_size()) -> tree-counters, observe")
TREE_WALK = observed("the tree walk (Dialect.tree_view) -> PoolSnapshot.tree_slots, evictable_slots, recounts")
TREE_CHECK = observed("the tree's own check (Dialect.tree_view) -> PoolSnapshot.tree_problem -> tree-own-check")
NODE_VALUE = observed("the tree walk -> PoolSnapshot.tree_slots / evictable_slots -> page-ownership, eviction rules")
NODE_LOCK = observed("the tree walk -> evictable_slots, evictable_recount / protected_recount -> tree-counters")
NODE_KEY = observed("the prefix peek (Dialect.peek) -> the admission's match length, judged by the model")
NODE_PARENT = observed(
    "lock and unlock walk it to the root; a wrong parent shows in the lock counts -> protected_recount, tree-counters"
)
NODE_CHILDREN = observed("the tree walk descends it -> PoolSnapshot.tree_slots and the recounts")

# -- shared configuration --------------------------------------------------------------------------------

CPU = configured("'cpu': the target runs on CPU only")
POOL_REF = configured("the ReqToTokenPool the target built")
ALLOCATOR_REF = configured("the token allocator the target built")
CACHE_REF = configured("the prefix cache the target built")
PAGE_SIZE = configured("PoolConfig.page_size; read into PoolSnapshot.page_size by the allocator's copy")
KV_DTYPE = configured("torch.float16: sizes KV buffers, which the allocator never touches")
NO_KVCACHE = configured("None: no KV buffers (the allocator hands out indices only)")
NO_EAGLE = configured("False: no EAGLE draft model")
LRU_POLICY = configured("the LRU strategy: the default eviction policy")
NO_EVENTS = configured("False: KV cache events off")
NO_OVERLAP = configured("False: no overlap scheduling")
NO_SPEC = configured("SpeculativeAlgorithm.NONE: the target does not drive speculative decoding")

# -- shared reasons ----------------------------------------------------------------------------------------

LOGPROBS = unset("logprob requests and buffers; the target asks for none (return_logprob False) and they hold no KV")
SAMPLING = unset("sampling controls (logit processors, masks, vocab, stop ids); they choose tokens, never slots")
GRAMMAR = unset("constrained decoding and reasoning-parser state; no grammar or parser is set")
SPECULATIVE = unset("speculative decoding and beam search; the target runs SpeculativeAlgorithm.NONE")
DISAGGREGATION = unset("PD disaggregation (bootstrap, KV transfer, metadata buffers); a single-node pool has no peer")
MULTIMODAL = unset("multimodal, embedding and pooling inputs; the prompts are token ids only")
MODEL_OUTPUTS = unset("extra model outputs (hidden states, routed experts, top-k); none asked for, none hold KV")
HICACHE = unset("hierarchical cache (host and storage tiers, prefetch, write-through); no host pool or storage")
SESSIONS = unset("streaming sessions; no request belongs to a session")
PARALLEL = unset("data / tensor / pipeline / context parallelism and CUDA graphs; one CPU rank, no graphs")
OUTPUT = unset("output streaming and detokenization; nothing is sent to a tokenizer manager")
LORA = unset("LoRA adapters; none loaded")
MAMBA = unset("mamba state; a full-attention pool has no mamba pool")
SWA = unset("sliding-window attention state; a full-attention pool has no SWA pool")
HISPARSE = unset("hierarchical sparse attention; no hisparse coordinator")
DLLM = unset("diffusion-LLM decoding; no dLLM config")
KV_EVENTS = unset("KV cache events and page hashes; events are off")
TLRU = unset("T-LRU and logical-page sharding bookkeeping; the policy is LRU and sharding is off")
NGRAM = unset("n-gram embedding tables (engram, ne_token_table); not enabled")
ROUTING = unset("request routing and priority scheduling hints; one rank, no priorities")
METRICS = irrelevant("metrics and timing (cached-token counts, hit counts, time stats); read by reporting only")
BATCH_COPY = irrelevant(
    "the batch's per-forward copy of request state, rebuilt from the records each round; what it writes lands in "
    "req_to_token and the records, which are observed"
)
BATCH_MODE = irrelevant("how the model runs this batch (forward mode, inputs, sampling); holds no KV of its own")
LRU_ORDER = irrelevant(
    "eviction order: which unlocked leaf goes first is the implementation's choice, which the model leaves free "
    "(properties/eviction.py checks locks and shortfall only)"
)
PRIORITY_ORDER = irrelevant("eviction priority: it only orders victims, the implementation's choice (as LRU order)")
NODE_ID = irrelevant("a serial id that names a node; holds no KV")
RETRACTION = irrelevant("retraction bookkeeping for scheduling heuristics and logs; release paths do not read it")
CONSTANT = irrelevant("an empty result or buffer returned for an empty match; never written")

# -- the classes -----------------------------------------------------------------------------------------------

REQ_TO_TOKEN_POOL: dict[str, Entry] = {
    "_alloc_size": configured("rows + 1: the padding row 0 plus PoolConfig.rows"),
    "_aux_cache": unset("an auxiliary row cache (mamba / SWA side pools) attached by hybrid caches"),
    "device": CPU,
    "free_slots": FREE_ROWS,
    "max_context_len": observed("PoolSnapshot.width -> record-domain, the page check"),
    "req_generation": GENERATION,
    "req_to_token": REQ_TO_TOKEN,
    "size": observed("PoolSnapshot.rows_total -> record-domain, row-conservation"),
}

TOKEN_ALLOCATOR: dict[str, Entry] = {
    "_kvcache": NO_KVCACHE,
    "device": CPU,
    "dtype": KV_DTYPE,
    "evict_to_free_tokens": configured(
        "without on-demand eviction, the target's no-op (UnifiedTree.watch_evictions): allocation then evicts nothing"
    ),
    "free_group": GROUP,
    "free_pages": FREE_PAGES,
    "is_not_in_free_group": GROUP,
    "need_sort": configured("PoolConfig.need_sort: whether frees wait in release_pages for a sorted merge"),
    "page_size": observed("PoolSnapshot.page_size -> every page invariant"),
    "release_pages": RELEASE_PAGES,
    "size": observed("PoolSnapshot.tokens_total -> token-conservation, page-ownership"),
}

PAGED_ALLOCATOR: dict[str, Entry] = {
    **TOKEN_ALLOCATOR,
    "debug_mode": configured("False: sglang's own allocator debug checks are off, as in a server"),
    "free_page_ids_group": GROUP,
    "free_page_reps_group": GROUP,
    "num_pages": configured("PoolConfig.tokens // page_size; PoolSnapshot.num_pages reads the config's"),
    "num_staged_pages": observed(
        "PoolSnapshot.allocator_problem -> allocator-counters (against staged_pages; available_size adds it to "
        "the free pages)"
    ),
    "staged_pages": RELEASE_PAGES,
    "use_triton_kernels": configured("PoolConfig.kernel_backend == 'triton' (Dialect.select_kernels)"),
}

REQ_KV_INFO: dict[str, Entry] = {
    "cache_inserted_len": irrelevant(
        "how much of the request the tree already holds from its own inserts; read only to count hits once "
        "(InsertParams.inserted_len -> hit_count)"
    ),
    "cache_protected_len": PROTECTED,
    "component_evicted_seqlens": unset("per-component (SWA / mamba) evicted lengths; only the full component exists"),
    "kv_allocated_len": ALLOCATED,
    "kv_committed_len": COMMITTED,
    "mamba_cow_src_index": MAMBA,
    "mamba_last_track_idx": MAMBA,
    "mamba_last_track_seqlen": MAMBA,
    "mamba_needs_clear": MAMBA,
    "mamba_next_track_idx": MAMBA,
    "mamba_ping_pong_empty": MAMBA,
    "mamba_ping_pong_track_buffer": MAMBA,
    "mamba_pool_idx": MAMBA,
    "mamba_prev_track_seqlen": MAMBA,
    "mamba_untracked_decode_batch_idx": MAMBA,
    "req_pool_idx": ROW,
    "retraction_backup": unset("the KV a retraction offloads to host for a later reload; retraction here releases"),
    "swa_evict_floor": SWA,
    "swa_evicted_seqlen": SWA,
}

REQ: dict[str, Entry] = {
    "_cache_breakdown_computed": METRICS,
    "_is_reasoning_over": GRAMMAR,
    "_session_mm_items": SESSIONS,
    "_think_end_match_len": GRAMMAR,
    "_think_end_matcher": GRAMMAR,
    "_think_start_match_len": GRAMMAR,
    "already_computed": METRICS,
    "arrival_processed_tokens": ROUTING,
    "beam_group": SPECULATIVE,
    "best_match_node": irrelevant(
        "the deepest node any tier matched, for a host or storage load-back (HiCache); the device match and its "
        "lock are last_node / lock"
    ),
    "bootstrap_host": configured("FAKE_BOOTSTRAP_HOST for the skip-insert kind (a PD warm-up), else None", kept=False),
    "bootstrap_port": DISAGGREGATION,
    "bootstrap_room": DISAGGREGATION,
    "cache_protected_len": PROTECTED,
    "cache_request_handle": irrelevant("the request's id and attempt for cache-controller callbacks (HiCache)"),
    "cache_salt": configured("None: the tree keys matches by token ids alone (a salt would namespace them)"),
    "cached_tokens": METRICS,
    "cached_tokens_device": METRICS,
    "cached_tokens_host": METRICS,
    "cached_tokens_storage": METRICS,
    "custom_logit_processor": SAMPLING,
    "customized_info": OUTPUT,
    "decision_layout": MODEL_OUTPUTS,
    "decode_batch_idx": irrelevant("the request's index in its decode batch, for per-batch metrics and logging"),
    "decoded_text": OUTPUT,
    "dimensions": MODEL_OUTPUTS,
    "disagg_decode_prefix_len": DISAGGREGATION,
    "disagg_kv_sender": DISAGGREGATION,
    "disagg_prefill_dp_rank": DISAGGREGATION,
    "discard_output_reason": OUTPUT,
    "dllm_algo_state": DLLM,
    "dllm_block_offset": DLLM,
    "dllm_config": DLLM,
    "dllm_has_literal_mask": DLLM,
    "dllm_incomplete_ids": DLLM,
    "dllm_initialized": DLLM,
    "dllm_phase": DLLM,
    "early_send_prefix_end": DISAGGREGATION,
    "embedding": MODEL_OUTPUTS,
    "eos_token_ids": SAMPLING,
    "expected_kv_checksum": DISAGGREGATION,
    "extend_batch_idx": irrelevant("the request's index in its extend batch, for per-batch metrics and logging"),
    "extend_end": EXTEND_END,
    "extend_range": EXTEND_END,
    "extra_key": configured("None: no LoRA or extra namespace in the match key"),
    "finished_len": observed(
        "set by upstream's finish check (the scheduler host's finish_check: the length cap, so the full output) ->"
        " release_kv_cache's owned_kv_len, whose range the model's release judges"
    ),
    "finished_output": OUTPUT,
    "finished_reason": observed(
        "set by upstream's own finish check and abort paths (update_finish_state, process_pending_chunked_abort);"
        " Req.finished() -> the request's status after finish, abort and decode (RecordView.status)"
    ),
    "full_untruncated_fill_ids": FILL,
    "grammar": GRAMMAR,
    "grammar_key": GRAMMAR,
    "grammar_wait_ct": GRAMMAR,
    "has_log_time_stats": METRICS,
    "hidden_states": MODEL_OUTPUTS,
    "hidden_states_tensor": MODEL_OUTPUTS,
    "hisparse_staging": HISPARSE,
    "host_hit_is_storage": HICACHE,
    "host_hit_length": HICACHE,
    "host_loaded_length": HICACHE,
    "http_worker_ipc": OUTPUT,
    "indexer_topk": MODEL_OUTPUTS,
    "inflight_middle_chunks": observed("RecordView.inflight_middle_chunks -> observe (the model's in-flight counter)"),
    "input_embeds": MULTIMODAL,
    "input_logprob_sent": LOGPROBS,
    "input_token_logprobs": LOGPROBS,
    "is_retracted": RETRACTION,
    "kv": observed(
        "the record: on 0.5.23 its fields are ReqKvInfo's; on 0.5.18 None once released -> RecordView.allocated_len 0 "
        "-> released-unallocated"
    ),
    "kv_committed_len": COMMITTED,
    "kv_hints": HICACHE,
    "kv_rotation_base": TLRU,
    "last_host_node": irrelevant(
        "the match's deepest node that a host tier would load back from; with no host tier the device match's "
        "node, read only by load-back (HiCache)"
    ),
    "last_node": LOCK,
    "lock": LOCK,
    "logprob": irrelevant("the request's logprob accumulator object; no logprobs are asked for"),
    "logprob_start_len": LOGPROBS,
    "lora_id": LORA,
    "mamba_branching_seqlen": MAMBA,
    "mamba_cow_src_index": MAMBA,
    "mamba_host_hit_length": MAMBA,
    "mamba_last_track_idx": MAMBA,
    "mamba_last_track_seqlen": MAMBA,
    "mamba_lazy_checkpoint": MAMBA,
    "mamba_lazy_is_insert": MAMBA,
    "mamba_needs_clear": MAMBA,
    "mamba_next_track_idx": MAMBA,
    "mamba_ping_pong_track_buffer": MAMBA,
    "mamba_pool_idx": MAMBA,
    "metadata_buffer_index": DISAGGREGATION,
    "metrics_collector": METRICS,
    "mm_audio_tokens": MULTIMODAL,
    "mm_image_tokens": MULTIMODAL,
    "mm_token_counts_ready": MULTIMODAL,
    "mm_video_tokens": MULTIMODAL,
    "multi_item_delimiter_indices": MULTIMODAL,
    "multimodal_inputs": MULTIMODAL,
    "num_matched_prefix_tokens": METRICS,
    "origin_input_ids": TOKENS,
    "origin_input_ids_unpadded": irrelevant("the prompt before multimodal padding, for output processing"),
    "output_dsa_topk_indices": MODEL_OUTPUTS,
    "output_ids": TOKENS,
    "output_token_sampling_logprobs": LOGPROBS,
    "output_token_sampling_mask": SAMPLING,
    "output_topk_index": MODEL_OUTPUTS,
    "output_topk_p": MODEL_OUTPUTS,
    "pd_rebootstrap_forced_output_id": DISAGGREGATION,
    "pending_bootstrap": DISAGGREGATION,
    "pooled_hidden_state": MODEL_OUTPUTS,
    "positional_embed_overrides": MULTIMODAL,
    "prefill_attempt_count": RETRACTION,
    "prefix_indices": PREFIX,
    "prefix_len": PREFIX,
    "priority": configured(
        "0 (a queued request: the fuzzer's 0-2), what a priority-scheduling server gives; the prefill round's "
        "queue order and preemption read it, and the tree's insert gives it to its nodes (eviction priority, "
        "which only orders victims)",
        kept=False,
    ),
    "read_offset": OUTPUT,
    "reasoning_tokens": GRAMMAR,
    "req_pool_idx": ROW,
    "require_reasoning": GRAMMAR,
    "retracted_stain": RETRACTION,
    "retraction_backup": REQ_KV_INFO["retraction_backup"],
    "retraction_count": RETRACTION,
    "retraction_mb_id": PARALLEL,
    "return_flat_raw_top_logprobs": LOGPROBS,
    "return_hidden_states": MODEL_OUTPUTS,
    "return_hidden_states_mode": MODEL_OUTPUTS,
    "return_indexer_topk": MODEL_OUTPUTS,
    "return_logprob": LOGPROBS,
    "return_pooled_hidden_states": MODEL_OUTPUTS,
    "return_routed_experts": MODEL_OUTPUTS,
    "return_sampling_mask": SAMPLING,
    "rid": configured("str(request id): names the request; the pool's code reads it for logs and host callbacks"),
    "routed_dp_rank": PARALLEL,
    "routed_experts": MODEL_OUTPUTS,
    "routed_experts_start_len": MODEL_OUTPUTS,
    "routing_key": ROUTING,
    "sampling_logprobs_mode": LOGPROBS,
    "sampling_mask_rows": SAMPLING,
    "sampling_params": configured("SamplingParams(max_new_tokens=PoolConfig.width); its fields choose tokens only"),
    "send_decode_id_offset": OUTPUT,
    "send_output_sampling_mask_offset": OUTPUT,
    "send_output_token_logprobs_offset": OUTPUT,
    "send_token_offset": OUTPUT,
    "session": SESSIONS,
    "session_generation": SESSIONS,
    "session_id": SESSIONS,
    "skip_lock_node_ids": SWA,
    "skip_radix_cache_insert": configured(
        "True only for the skip-insert kind (Dialect.new_req asserts Req took it); the model's KIND_SKIP_INSERT"
    ),
    "spec_cap_lens_histogram": SPECULATIVE,
    "spec_correct_drafts_histogram": SPECULATIVE,
    "spec_num_block_accept_tokens": SPECULATIVE,
    "spec_num_cap_tokens": SPECULATIVE,
    "spec_num_correct_drafts": SPECULATIVE,
    "spec_verify_ct": SPECULATIVE,
    "staged_prefetch_plan": HICACHE,
    "start_send_idx": OUTPUT,
    "storage_hit_length": HICACHE,
    "storage_hit_start": HICACHE,
    "storage_prefetch_last_match_len": HICACHE,
    "storage_prefetch_retry_attempts": HICACHE,
    "stream": OUTPUT,
    "surr_offset": OUTPUT,
    "swa_branching_seqlen": SWA,
    "swa_evict_floor": SWA,
    "swa_host_hit_length": SWA,
    "swa_prefix_lock_released": SWA,
    "swa_uuid_for_lock": SWA,
    "temp_input_token_ids_logprobs_idx": LOGPROBS,
    "temp_input_token_ids_logprobs_val": LOGPROBS,
    "temp_input_top_logprobs_idx": LOGPROBS,
    "temp_input_top_logprobs_val": LOGPROBS,
    "temp_scaled_logprobs": LOGPROBS,
    "time_stats": METRICS,
    "tmp_end_idx": OUTPUT,
    "to_finish": observed(
        "set by upstream's abort_request on a running request, read by the finish check the abort then runs ->"
        " Req.finished() -> RecordView.status"
    ),
    "token_indices_to_pool": MODEL_OUTPUTS,
    "token_type_ids": MULTIMODAL,
    "tokenizer": OUTPUT,
    "top_p_normalized_logprobs": LOGPROBS,
    "vocab_size": SAMPLING,
    "weight_version_events": OUTPUT,
}

SCHEDULE_BATCH: dict[str, Entry] = {
    "after_idle_gap": ROUTING,
    "batch_is_full": ROUTING,
    "beam_tail": SPECULATIVE,
    "can_run_decode_cuda_graph": PARALLEL,
    "can_run_dp_breakable_cuda_graph": PARALLEL,
    "can_run_dp_cuda_graph": PARALLEL,
    "can_run_dp_draft_cuda_graph": PARALLEL,
    "can_run_dp_prefill_cuda_graph": PARALLEL,
    "chunked_req": configured(
        "None: the scheduler's chunked request is its own field; the target tracks chunks per request"
    ),
    "chunked_req_next_prompt_token": configured("None: as chunked_req"),
    "contains_last_prefill_chunk": configured("True: init_new's default, read by the overlap scheduler only"),
    "decoding_reqs": configured("None: no mixed chunked prefill (decodes run in their own batch)"),
    "device": CPU,
    "dllm_config": DLLM,
    "dp_balance_stats": PARALLEL,
    "dp_cooperation_info": PARALLEL,
    "dp_prefill_cuda_graph_max_prefix_len": PARALLEL,
    "dp_spec_prefill_coordination_applied": PARALLEL,
    "dp_spec_prefill_coordination_metadata": PARALLEL,
    "draft_global_num_tokens": SPECULATIVE,
    "draft_global_num_tokens_for_logprob": SPECULATIVE,
    "enable_overlap": NO_OVERLAP,
    "encoder_cached": MULTIMODAL,
    "encoder_lens": MULTIMODAL,
    "encoder_lens_cpu": MULTIMODAL,
    "encoder_out_cache_loc": MULTIMODAL,
    "encoder_swa_reset": MULTIMODAL,
    "engram_history": NGRAM,
    "engram_staged_rows": NGRAM,
    "extend_input_logprob_token_ids": LOGPROBS,
    "extend_lens": BATCH_COPY,
    "extend_logprob_start_lens": irrelevant("where each request's input logprobs start ([0]); the logits processor's"),
    "extend_num_tokens": BATCH_COPY,
    "forward_iter": PARALLEL,
    "forward_mode": BATCH_MODE,
    "fpm_start_time": METRICS,
    "global_forward_mode": PARALLEL,
    "global_num_tokens": PARALLEL,
    "global_num_tokens_for_logprob": PARALLEL,
    "global_spec_verify_tier_num_tokens": SPECULATIVE,
    "has_grammar": GRAMMAR,
    "hicache_consumer_index": HICACHE,
    "hisparse_coordinator": HISPARSE,
    "inner_idle_batch": PARALLEL,
    "input_embeds": MULTIMODAL,
    "input_ids": BATCH_MODE,
    "is_extend_in_batch": PARALLEL,
    "is_prefill_only": configured("False: requests generate (no prefill-only scoring)"),
    "launch_ts": METRICS,
    "mamba_clear_indices": MAMBA,
    "mamba_cow_dst_indices": MAMBA,
    "mamba_cow_src_indices": MAMBA,
    "mamba_decode_batch_idx_cpu": MAMBA,
    "mamba_lazy_spec_track_positions_cpu": MAMBA,
    "mamba_prefill_track_mask_cpu": MAMBA,
    "mamba_track_buffer_indices": MAMBA,
    "mamba_track_indices": MAMBA,
    "mamba_track_mask": MAMBA,
    "mamba_track_mask_cpu": MAMBA,
    "mamba_track_mask_next_cpu": MAMBA,
    "mamba_track_seqlens": MAMBA,
    "mamba_track_seqlens_cpu": MAMBA,
    "mix_running_indices": configured("None: no mixed chunked prefill"),
    "mix_running_indices_cpu": configured("None: no mixed chunked prefill"),
    "model_config": configured("a stand-in: decoder-only, vocab 32000 (dialects._model_config)"),
    "multimodal_inputs": irrelevant("one None per request: the batch's multimodal inputs, and the prompts have none"),
    "ne_skip_token_table_update": NGRAM,
    "ne_token_table": NGRAM,
    "orig_seq_lens": BATCH_COPY,
    "out_cache_loc": BATCH_COPY,
    "out_cache_loc_dsv4": MODEL_OUTPUTS,
    "prefill_chunk_processed": PARALLEL,
    "prefill_input_ids_cpu": BATCH_MODE,
    "prefill_stats": METRICS,
    "prefix_lens": BATCH_COPY,
    "recv_skipper_forward_mode": PARALLEL,
    "replace_embeds": MULTIMODAL,
    "replace_positions": MULTIMODAL,
    "req_pool_indices": BATCH_COPY,
    "req_pool_indices_cpu": BATCH_COPY,
    "req_to_token_pool": POOL_REF,
    "reqs": configured("the target's Req objects of this batch (its own after split_batch)"),
    "return_hidden_states": MODEL_OUTPUTS,
    "return_hidden_states_mode": MODEL_OUTPUTS,
    "return_logprob": LOGPROBS,
    "sampling_info": BATCH_MODE,
    "seq_lens": BATCH_COPY,
    "seq_lens_cpu": BATCH_COPY,
    "seq_lens_sum": BATCH_COPY,
    "spec_algorithm": NO_SPEC,
    "spec_info": SPECULATIVE,
    "spec_verify_tier_num_tokens": SPECULATIVE,
    "split_forward_batch": PARALLEL,
    "split_forward_count": PARALLEL,
    "split_index": PARALLEL,
    "split_prefill_finished": PARALLEL,
    "split_prefill_start": PARALLEL,
    "tbo_split_seq_index": PARALLEL,
    "token_ids_logprobs": LOGPROBS,
    "token_to_kv_pool_allocator": ALLOCATOR_REF,
    "top_logprobs_nums": LOGPROBS,
    "tree_cache": CACHE_REF,
}

CHUNK_CACHE: dict[str, Entry] = {
    "device": CPU,
    "page_size": PAGE_SIZE,
    "protected_size_": PROTECTED_SIZE,
    "req_to_token_pool": POOL_REF,
    "token_to_kv_pool_allocator": ALLOCATOR_REF,
}

RADIX_CACHE: dict[str, Entry] = {
    "_empty_match_result": CONSTANT,
    "device": CPU,
    "disable": configured("False: the radix shape"),
    "disable_finished_insert": configured("False: finished requests are inserted, as in a server"),
    "enable_kv_cache_events": NO_EVENTS,
    "evict": configured(
        "the target's on-demand hook around the class's evict (PythonRadixTree.watch_evictions): logs, or refuses "
        "without on-demand eviction"
    ),
    "evictable_leaves": TREE_CHECK,
    "evictable_size_": EVICTABLE,
    "eviction_policy": configured("'lru': the default"),
    "eviction_strategy": LRU_POLICY,
    "is_eagle": NO_EAGLE,
    "kv_event_queue": KV_EVENTS,
    "page_size": PAGE_SIZE,
    "protected_size_": PROTECTED_SIZE,
    "req_to_token_pool": POOL_REF,
    "root_node": TREE_WALK,
    "token_to_kv_pool_allocator": ALLOCATOR_REF,
}

TREE_NODE: dict[str, Entry] = {
    "children": NODE_CHILDREN,
    "creation_time": LRU_ORDER,
    "event_hash_value": KV_EVENTS,
    "hash_value": KV_EVENTS,
    "hit_count": METRICS,
    "host_ref_counter": HICACHE,
    "host_value": HICACHE,
    "id": NODE_ID,
    "key": NODE_KEY,
    "last_access_time": LRU_ORDER,
    "lock_ref": NODE_LOCK,
    "parent": NODE_PARENT,
    "priority": PRIORITY_ORDER,
    "value": NODE_VALUE,
    "write_through_pending_id": HICACHE,
}

UNIFIED_RADIX_CACHE: dict[str, Entry] = {
    "_components_tuple": configured("(FullComponent,): full attention only"),
    "_enable_metrics_flag": METRICS,
    "_prefetch_outcome_stats": HICACHE,
    "_sliding_window_size": SWA,
    "_storage_attachment": HICACHE,
    "_storage_prefetch_hit_remaining_by_reqid": HICACHE,
    "_storage_prefetch_wait": HICACHE,
    "_tree_core_backend": configured("PoolConfig.tree_core ('rust' or 'python'); Dialect.new_cache checks the core"),
    "attn_cp_group": PARALLEL,
    "attn_tp_group": PARALLEL,
    "buffer_pipeline": HICACHE,
    "cache_controller": HICACHE,
    "components": configured("{FULL: FullComponent}: full attention only"),
    "decoder_swa_bounded_replay": SWA,
    "disable": configured("True for the chunk shape (--disable-radix-cache), False for radix"),
    "draft_swa_window": SWA,
    "enable_mamba_extra_buffer": MAMBA,
    "enable_session_radix_cache": SESSIONS,
    "enable_storage_metrics": METRICS,
    "evict_for_alloc": configured("the target's logging hook around upstream's (UnifiedTree.watch_evictions)"),
    "extra_metric_labels": METRICS,
    "hicache_storage_pass_prefix_keys": HICACHE,
    "host_memory_mode": HICACHE,
    "host_pool_group": HICACHE,
    "insert_session_id": SESSIONS,
    "is_mamba_enabled": MAMBA,
    "is_swa_enabled": SWA,
    "linker": HICACHE,
    "ongoing_backup": HICACHE,
    "ongoing_load_back": HICACHE,
    "ongoing_prefetch": HICACHE,
    "ongoing_write_through": HICACHE,
    "pp_group": PARALLEL,
    "pp_rank": PARALLEL,
    "pp_size": PARALLEL,
    "prefetch_loaded_storage_start_by_reqid": HICACHE,
    "prefetch_loaded_tokens_by_reqid": HICACHE,
    "prefetch_stop_policy": HICACHE,
    "prefetch_threshold": HICACHE,
    "prefetch_timeout_base": HICACHE,
    "prefetch_timeout_per_page": HICACHE,
    "req_to_token_pool": POOL_REF,
    "session": irrelevant("the streaming-session registry object; no request opens a session (see SESSIONS)"),
    "session_refs": irrelevant("the session reference tracker object; no request opens a session"),
    "sidecar_pool_specs": SWA,
    "storage_existence_cache": irrelevant("the storage backend's existence cache object; no storage backend"),
    "storage_metrics_collector": HICACHE,
    "storage_prefetch_retries": irrelevant("the storage prefetch retry policy object; no storage backend"),
    "token_to_kv_pool_allocator": ALLOCATOR_REF,
    "tp_group": PARALLEL,
    "tp_world_size": PARALLEL,
    "tree_components": configured("(ComponentType.FULL,): full attention only"),
    "tree_core": TREE_WALK,
    "work_list": HICACHE,
}

RUST_TREE_CORE: dict[str, Entry] = {
    "_allocator": ALLOCATOR_REF,
    "_binding": observed(
        "the Rust tree itself: walk_for_kv_canary, sanity_check, evictable / protected sizes -> "
        "PoolSnapshot.tree_slots, tree_problem, evictable_size, protected_size"
    ),
    "_empty_match_result": CONSTANT,
    "_page_size": PAGE_SIZE,
    "_swa_backup_index_mapper": SWA,
    "device": CPU,
    "enable_kv_cache_events": NO_EVENTS,
    "is_eagle": NO_EAGLE,
    "kv_events": irrelevant("the KV event recorder object; events are off"),
    "tree_components": configured("(ComponentType.FULL,): full attention only"),
}

PYTHON_TREE_CORE: dict[str, Entry] = {
    "_empty_device_indices": CONSTANT,
    "_empty_match_result": irrelevant("the empty match result, rebuilt at reset; names the root only"),
    "_is_tracking_unbacked_tokens": HICACHE,
    "_node_arena": observed(
        "node ids -> nodes: lock handles and last_node resolve through it (Dialect.tree_locked, lock); its "
        "nodes are the tree the walk and sanity_check read"
    ),
    "_ongoing_insert_walk_state": HICACHE,
    "_pending_internal_evictions": HICACHE,
    "_tracked_unbacked_tokens": HICACHE,
    "component_evictable_size_": EVICTABLE,
    "component_protected_size_": PROTECTED_SIZE,
    "component_types": configured("(ComponentType.FULL,): full attention only"),
    "components": configured("(FullComponent,): full attention only"),
    "components_by_type": configured("{FULL: FullComponent}: full attention only"),
    "device": CPU,
    "enable_external_cache_linker": HICACHE,
    "enable_hicache": HICACHE,
    "enable_session_radix_cache": SESSIONS,
    "enable_storage": HICACHE,
    "evictable_device_leaves": TREE_CHECK,
    "evictable_host_leaves": HICACHE,
    "eviction_strategy": LRU_POLICY,
    "full_host_duplicates": HICACHE,
    "has_swa_host_pool": SWA,
    "host_lru_lists": HICACHE,
    "is_eagle": NO_EAGLE,
    "is_host_memory_buffer_only": HICACHE,
    "is_write_back": HICACHE,
    "kv_events": irrelevant("the KV event recorder object; events are off"),
    "lru_lists": observed(
        "sanity_check compares their members with the tree's unlocked nodes -> PoolSnapshot.tree_problem; their "
        "order is eviction order, the implementation's choice"
    ),
    "page_size": PAGE_SIZE,
    "root_node": TREE_WALK,
    "tlru_bookkeeping": TLRU,
    "write_back_duplicate_reclaim_digest": HICACHE,
    "write_through_threshold": HICACHE,
}

UNIFIED_TREE_NODE: dict[str, Entry] = {
    "_tlru_cached_prefix_len": TLRU,
    "_tlru_history_len": TLRU,
    "children": NODE_CHILDREN,
    "component_data": observed("per-component value and lock count: ComponentData's rows (FULL is the one used)"),
    "component_types": configured("(ComponentType.FULL,): full attention only"),
    "creation_time": LRU_ORDER,
    "event_hash_value": KV_EVENTS,
    "external_cache_stored": HICACHE,
    "hash_value": KV_EVENTS,
    "hit_count": METRICS,
    "id": NODE_ID,
    "key": NODE_KEY,
    "last_access_time": LRU_ORDER,
    "load_back_pending_id": HICACHE,
    "lru_next": LRU_ORDER,
    "lru_prev": LRU_ORDER,
    "parent": NODE_PARENT,
    "priority": PRIORITY_ORDER,
    "rotation_base": TLRU,
    "write_through_pending_id": HICACHE,
}

COMPONENT_DATA: dict[str, Entry] = {
    "host_lock_ref": HICACHE,
    "host_value": HICACHE,
    "lock_ref": NODE_LOCK,
    "metadata": unset("per-component side data (SWA / mamba); only the full component exists"),
    "session_ids": SESSIONS,
    "session_ref": SESSIONS,
    "value": NODE_VALUE,
}

# Every driven class, by `type(obj).__name__`: the versions that build it, and its fields.
CLASSES: dict[str, tuple[tuple[str, ...], dict[str, Entry]]] = {
    "ReqToTokenPool": (VERSIONS, REQ_TO_TOKEN_POOL),
    "TokenToKVPoolAllocator": (VERSIONS, TOKEN_ALLOCATOR),
    "PagedTokenToKVPoolAllocator": (VERSIONS, PAGED_ALLOCATOR),
    "ChunkCache": (("0.5.18",), CHUNK_CACHE),
    "RadixCache": (("0.5.18",), RADIX_CACHE),
    "TreeNode": (("0.5.18",), TREE_NODE),
    "UnifiedRadixCache": (("0.5.23",), UNIFIED_RADIX_CACHE),
    "RustUnifiedTreeCore": (("0.5.23",), RUST_TREE_CORE),
    "UnifiedTreeCore": (("0.5.23",), PYTHON_TREE_CORE),
    "UnifiedTreeNode": (("0.5.23",), UNIFIED_TREE_NODE),
    "ComponentData": (("0.5.23",), COMPONENT_DATA),
    "ScheduleBatch": (VERSIONS, SCHEDULE_BATCH),
    "Req": (VERSIONS, REQ),
    "ReqKvInfo": (VERSIONS, REQ_KV_INFO),
}


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# The fields of a class both versions build that only one of them has (the record moved into `req.kv` in 0.5.23).
ONLY_IN: dict[str, dict[str, frozenset[str]]] = {
    "0.5.18": {
        "Req": _names(
            "cache_protected_len extend_range kv_committed_len mamba_cow_src_index mamba_last_track_idx "
            "mamba_last_track_seqlen mamba_lazy_is_insert mamba_needs_clear mamba_next_track_idx "
            "mamba_ping_pong_track_buffer mamba_pool_idx output_token_sampling_logprobs "
            "output_token_sampling_mask prefix_indices req_pool_idx retraction_backup "
            "send_output_sampling_mask_offset skip_lock_node_ids swa_evict_floor swa_prefix_lock_released "
            "swa_uuid_for_lock"
        ),
        "ScheduleBatch": frozenset({"can_run_dp_breakable_cuda_graph", "can_run_dp_cuda_graph", "fpm_start_time"}),
        "ReqKvInfo": frozenset({"swa_evicted_seqlen"}),
        "TokenToKVPoolAllocator": frozenset({"is_not_in_free_group"}),
        "PagedTokenToKVPoolAllocator": frozenset({"free_page_reps_group", "is_not_in_free_group"}),
    },
    "0.5.23": {
        "Req": _names(
            "_session_mm_items _think_start_match_len arrival_processed_tokens beam_group cache_request_handle "
            "decision_layout discard_output_reason dllm_has_literal_mask expected_kv_checksum extend_end "
            "host_hit_is_storage host_loaded_length kv_hints kv_rotation_base lock mamba_lazy_checkpoint "
            "mm_token_counts_ready prefix_len sampling_logprobs_mode sampling_mask_rows staged_prefetch_plan "
            "storage_hit_start storage_prefetch_last_match_len storage_prefetch_retry_attempts "
            "swa_branching_seqlen token_indices_to_pool weight_version_events"
        ),
        "ScheduleBatch": _names(
            "beam_tail can_run_decode_cuda_graph can_run_dp_draft_cuda_graph can_run_dp_prefill_cuda_graph "
            "dp_balance_stats dp_prefill_cuda_graph_max_prefix_len dp_spec_prefill_coordination_applied "
            "dp_spec_prefill_coordination_metadata draft_global_num_tokens draft_global_num_tokens_for_logprob "
            "encoder_swa_reset engram_history engram_staged_rows mamba_prefill_track_mask_cpu "
            "mamba_track_seqlens_cpu mix_running_indices_cpu prefill_chunk_processed split_prefill_start"
        ),
        "ReqKvInfo": frozenset(set(REQ_KV_INFO) - {"kv_allocated_len", "swa_evicted_seqlen"}),
        "ReqToTokenPool": frozenset({"_aux_cache"}),
        # Set on the instance by UnifiedTree.watch_evictions (radix tree, no on-demand eviction).
        "TokenToKVPoolAllocator": frozenset({"evict_to_free_tokens"}),
        "PagedTokenToKVPoolAllocator": frozenset(
            {"evict_to_free_tokens", "free_page_ids_group", "num_staged_pages", "staged_pages", "use_triton_kernels"}
        ),
    },
}


def fields_of(cls: str, version: str) -> dict[str, Entry]:
    """The entries of `cls` on `version` (none where that version does not build the class)."""
    versions, entries = CLASSES[cls]
    if version not in versions:
        return {}
    others = set().union(*(ONLY_IN[v].get(cls, frozenset()) for v in VERSIONS if v != version))
    return {name: entry for name, entry in entries.items() if name not in others}
