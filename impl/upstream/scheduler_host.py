"""A real upstream `Scheduler` around the target's pools, built as SGLang's own unit tests build one.

`Scheduler.__new__` gives the real class with every mixin; only the attributes its lifecycle methods read are set,
each named in `_scheduler_fields` (a method reading one not named there fails with Python's own AttributeError,
which names it: a crash of the harness, never a finding). Stand-ins exist only for what lies outside the KV
lifecycle: the transport back to the tokenizer, metrics, the grammar queue, and the model worker, which is the
fuzzer's tokens handed to the result pass as a `GenerationBatchResult`. The methods themselves run unmodified:
`flush_cache` (and its `is_fully_idle`), `abort_request`, `process_pending_chunked_abort`, the retract-mode
`pause_generation` and `continue_generation`, `update_running_batch`
(its filter, its decode-memory check, the retraction, the re-queue `_add_request_to_queue` and the abort's output),
the prefill half of `get_next_batch_to_run` (`get_new_batch_prefill`: its `PrefillAdder` over the waiting queue and
the chunked request, the new batch and its `prepare_for_extend`), and the result processor's
`process_batch_result_decode` and finish release (`_handle_finish_state_updated_req`).

Before each call the adapter shows the scheduler where each request is (`show`): the decoding requests in
`running_batch`, the waiting ones in `waiting_queue`, a request mid-prefill as `chunked_req`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import types
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch

# A request's rid as the scheduler sees it: the terminator keeps one rid from being a prefix of another, since
# `abort_request` matches with `rid.startswith`.
RID_END = "#"


def upstream_rid(rid: int) -> str:
    return f"{rid}{RID_END}"


class StandIn:
    """A collaborator outside the KV lifecycle (metrics, output transport, the grammar queue): every method call is
    taken and counted; every value it must hold is given by name at construction."""

    def __init__(self, role: str, **values: Any) -> None:
        self._role = role
        self.calls: list[str] = []
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append(name)

        return call

    def __repr__(self) -> str:
        return f"StandIn({self._role})"


class SchedulerHost:
    """One upstream `Scheduler` and its `SchedulerBatchResultProcessor` over a target's pools."""

    def __init__(self, dialect: Any, pool: Any, allocator: Any, cache: Any) -> None:
        from sglang.srt.managers.scheduler import Scheduler

        self.dialect = dialect
        scheduler = object.__new__(Scheduler)
        for name, value in _scheduler_fields(dialect, pool, allocator, cache).items():
            setattr(scheduler, name, value)
        self.scheduler = scheduler
        self.processor = _result_processor(scheduler)

    # -- where the requests are ------------------------------------------------------------------------------

    def show(self, running: list[Any], waiting: list[Any], chunked: Any) -> None:
        """Put the requests where the scheduler keeps them: `running` decoding, `waiting` queued, `chunked` (or
        None) mid-prefill."""
        s = self.scheduler
        s.running_batch = self._batch(running)
        s.waiting_queue = list(waiting)
        s.chunked_req = chunked
        s.last_batch = None

    def _batch(self, reqs: list[Any]) -> Any:
        from sglang.srt.managers.schedule_batch import ScheduleBatch

        if not reqs:
            return ScheduleBatch(reqs=[], batch_is_full=False)
        s = self.scheduler
        return self.dialect.new_batch(reqs, s.req_to_token_pool, s.token_to_kv_pool_allocator, s.tree_cache)

    # -- the scheduler's methods ---------------------------------------------------------------------------

    def flush_cache(self) -> bool:
        """`Scheduler.flush_cache()`: whether it flushed (False: not fully idle, which it logs as a warning on the
        root logger; the adapter's refusal carries that news instead)."""
        with _root_warnings_off():
            return bool(self.scheduler.flush_cache())

    def abort(self, rid: int) -> None:
        """`Scheduler.abort_request(AbortReq(rid))`, then the next step's `process_pending_chunked_abort()`."""
        from sglang.srt.managers.io_struct import AbortReq

        self.scheduler.abort_request(AbortReq(rid=upstream_rid(rid)))
        self.scheduler.process_pending_chunked_abort()

    def update_running_batch(self) -> Any:
        """The decode round's half in `get_next_batch_to_run`: `running_batch = update_running_batch(running_batch)`;
        returns the batch to decode (None or empty: none this round)."""
        s = self.scheduler
        with _root_warnings_off():  # a retraction logs its warning
            s.running_batch = s.update_running_batch(s.running_batch)
        return s.running_batch

    def pause_retract(self) -> None:
        """A weight update's pause: `pause_generation(PauseGenerationReqInput(mode="retract"))`, then
        `continue_generation(ContinueGenerationReqInput())`."""
        from sglang.srt.managers.io_struct import ContinueGenerationReqInput, PauseGenerationReqInput

        with _root_warnings_off():
            self.scheduler.pause_generation(PauseGenerationReqInput(mode="retract"))
            self.scheduler.continue_generation(ContinueGenerationReqInput())

    def prefill_round(self) -> Any:
        """The prefill half of `get_next_batch_to_run`: `get_new_batch_prefill(running_batch)`, whose
        `PrefillAdder` picks from the waiting queue (after the chunked request), builds the batch and prepares its
        extend; returns that batch (None: nothing to run). The pipeline's micro-batch budget is the server's
        default, its running-request limit; priority scheduling and preemption are on for the call
        (`_priority_preemption`)."""
        s = self.scheduler
        with _micro_batches(s.max_running_requests), _priority_preemption(s):
            plan = s.get_new_batch_prefill(s.running_batch)
        s.running_batch = getattr(plan, "running_batch", s.running_batch)
        return getattr(plan, "batch_to_run", plan)

    def decode_result(self, batch: Any, tokens: list[int]) -> None:
        """The result pass of a decode batch (`process_batch_result_decode`): the model worker sampled `tokens`,
        one per request of `batch` in order."""
        from sglang.srt.managers.utils import GenerationBatchResult

        result = GenerationBatchResult(next_token_ids=torch.tensor(tokens, dtype=torch.int64))
        self.processor.process_batch_result_decode(batch, result)

    def prefill_result(self, batch: Any, tokens: list[int]) -> None:
        """The result pass of a prefill batch (`process_batch_result_prefill`): the model worker sampled `tokens`,
        one per request of `batch` in order."""
        from sglang.srt.managers.utils import GenerationBatchResult

        result = GenerationBatchResult(next_token_ids=torch.tensor(tokens, dtype=torch.int64))
        self.processor.process_batch_result_prefill(batch, result)

    def stash_chunked(self, req: Any) -> None:
        """`Scheduler.stash_chunked_request(req)`: the chunked request's stash at the top of the next round."""
        self.scheduler.stash_chunked_request(req)

    def finish_check(self, req: Any, batch: Any, accepted: int = 0) -> None:
        """The per-request body of the result pass once the step's `accepted` tokens are in `output_ids` (0: a
        request that samples nothing more): its finish check (`Req.update_finish_state(accepted)`: a pending
        `to_finish`, else the stop conditions) and the finish release (`_handle_finish_state_updated_req`); the
        caller holds the pass's free group."""
        from sglang.srt.managers.utils import GenerationBatchResult

        req.update_finish_state(accepted)
        self.processor._handle_finish_state_updated_req(req, batch, GenerationBatchResult(), 0, None)


@contextlib.contextmanager
def _root_warnings_off() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


@contextlib.contextmanager
def _micro_batches(limit: int) -> Iterator[None]:
    """`get_parallel().pp_max_micro_batch_size` as `Scheduler.__init__` defaults it (its running-request limit),
    for the call. 0.5.21 on keep it among the parallel fields (overridden for the call); 0.5.18-0.5.20 in the
    published config, which `Scheduler.__init__` overrides for the process (`get_context().override`), as this
    does before each call."""
    from sglang.srt.runtime_context import get_context, get_parallel

    with contextlib.ExitStack() as scoped:
        try:
            scoped.enter_context(get_parallel().override(pp_max_micro_batch_size=limit))
        except ValueError:  # not a parallel field on this release
            get_context().override("scheduler.pp_max_micro_batch_size_default", pp_max_micro_batch_size=limit)
        yield


@contextlib.contextmanager
def _priority_preemption(s: Any) -> Iterator[None]:
    """Priority scheduling and priority preemption on for the prefill round (a request of a higher priority than
    running ones may preempt them, `PrefillAdder.preempt_to_schedule`, at any priority difference), off again
    after it: the decode retraction, the re-queue and the abort are driven as a server without priorities runs
    them, which the retraction's pick order is held to."""
    saved = (s.enable_priority_scheduling, s.enable_priority_preemption, s.policy.enable_priority_scheduling)
    s.enable_priority_scheduling = s.enable_priority_preemption = s.policy.enable_priority_scheduling = True
    try:
        yield
    finally:
        s.enable_priority_scheduling, s.enable_priority_preemption, s.policy.enable_priority_scheduling = saved


def _prefill_fields(pool: Any, allocator: Any, cache: Any) -> dict[str, Any]:
    """What `get_new_batch_prefill` and its `PrefillAdder` read: first come first served by priority (priority
    preemption on for the round only, `_priority_preemption`), no LoRA, mixed chunks, delayers or dynamic
    chunking; a chunked prefill size of half a row (page aligned) so that long prompts run in chunks, a prefill
    token budget of the whole pool, and as many running requests as rows."""

    from sglang.srt.managers.schedule_policy import SchedulePolicy
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    page = allocator.page_size
    chunk = max(pool.max_context_len // 2 // page * page, page)
    return {
        "policy": SchedulePolicy("fcfs", cache, False, False, False),
        "page_size": page,
        "chunked_prefill_size": chunk,
        "max_prefill_tokens": allocator.size,
        "max_running_requests": pool.size,
        "max_prefill_bs": pool.size,
        "truncation_align_size": None,
        "is_mixed_chunk": False,
        "enable_priority_preemption": False,
        "priority_scheduling_preemption_threshold": 0,  # any higher priority preempts (while preemption is on)
        "is_hybrid_swa": False,
        "enable_lora": False,
        "enable_unified_cache_external_linker": False,
        "prefill_delayer": None,
        "min_free_slots_delayer": None,
        "dynamic_chunk_sizer": None,
        "enable_dynamic_chunking": False,  # 0.5.18, 0.5.19
        "spec_algorithm": SpeculativeAlgorithm.NONE,
        "tp_worker": StandIn(
            "model worker",
            model_runner=StandIn(
                "model runner",
                prefill_aware_swa=False,
                attn_backend=types.SimpleNamespace(),  # no Triton tile size: the adder's fallback
            ),
        ),
        "load_inquirer": StandIn("load report", _get_num_pending_tokens=lambda **_: 0),
    }


def _scheduler_fields(dialect: Any, pool: Any, allocator: Any, cache: Any) -> dict[str, Any]:
    """Every attribute the driven methods read, with the value a single-rank, non-disaggregated, non-overlapped
    generation server without HiCache, dLLM, LMCache or a draft worker has."""
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    return {
        "server_args": dialect.server_args,  # what 0.5.18's result pass and abort read their switches from
        "req_to_token_pool": pool,
        "token_to_kv_pool_allocator": allocator,
        "tree_cache": cache,
        "running_batch": ScheduleBatch(reqs=[], batch_is_full=False),
        "waiting_queue": [],
        "chunked_req": None,
        "last_batch": None,
        "cur_batch_for_debug": None,
        "result_queue": deque(),
        "_pending_chunked_abort_req": None,
        "_engine_paused": False,
        "forward_ct": 0,
        "enable_skip_finishing_decode": False,  # the overlap scheduler's, off without overlap
        "new_token_ratio_tracker": _new_token_ratio_tracker(),
        "enable_priority_scheduling": False,
        "schedule_low_priority_values_first": False,
        "abort_on_priority_when_disabled": False,
        "max_queued_requests": None,
        "processed_tokens_counter": 0,
        "_pause_started_at": None,
        "_pause_intervals": [],
        "disagg_decode_prealloc_queue": None,
        "kv_events_publisher": StandIn("KV events"),
        "is_generation": True,
        "enable_overlap": False,
        "enable_overlap_mlx": False,
        "enable_continuous_input_polling": False,
        "enable_hisparse": False,
        "enable_hierarchical_cache": False,
        "enable_lmcache": False,
        "disaggregation_mode": DisaggregationMode.NULL,
        "decode_offload_manager": None,
        "hisparse_coordinator": None,
        "draft_worker": None,
        "model_worker": None,
        "mm_receiver": None,
        "dllm_config": None,
        "dllm_manager": _dllm_manager(),
        "model_config": _model_config(dialect),
        "grammar_manager": StandIn("grammar queue", grammar_queue=[]),
        "metrics_reporter": StandIn(
            "metrics",
            is_stats_logging_rank=False,
            num_generated_tokens=0,
            forward_ct_decode=0,
            enable_metrics=False,
            num_retracted_reqs=0,
            current_scheduler_metrics_enabled=False,
            last_gen_throughput=0.0,
        ),
        "metrics_collector": StandIn("metrics collector"),
        "output_streamer": StandIn("output transport"),
        "rust_server": None,
        "ipc_channels": StandIn("tokenizer transport", send_to_tokenizer=StandIn("tokenizer socket")),
        "beam_coordinator": StandIn("beam search, never enabled", pending_member_rows=lambda _batch: 0),
        "enable_hicache_storage": False,
        **_prefill_fields(pool, allocator, cache),
        **_parallel_state(),
    }


def _parallel_state() -> dict[str, Any]:
    """One rank of everything: 0.5.18 reads the scheduler's `ps` (later releases read `get_parallel()`)."""
    try:
        from sglang.srt.distributed.parallel_state_wrapper import ParallelState
    except ImportError:
        return {}
    return {"ps": ParallelState.trivial()}


def _new_token_ratio_tracker() -> Any:
    """The scheduler's own ratio tracker, built as `Scheduler.__init__` builds it (a retraction sets its ratio)."""
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker

    return NewTokenRatioTracker.from_config()


def _dllm_manager() -> Any:
    from sglang.srt.dllm.mixin.scheduler import DllmManager

    return DllmManager(dllm_config=None)


def _model_config(dialect: Any) -> Any:
    """The batch's model-config stand-in, with the fields the result pass reads of a model without a thinking
    template."""
    config = dialect.model_config()
    config.self_opened_think_start_ids = None  # 0.5.23
    config.think_end_ids = None  # 0.5.18
    return config


def _result_processor(scheduler: Any) -> Any:
    """`SchedulerBatchResultProcessor` as `Scheduler.init_batch_result_processor` builds it, given by field name
    (releases add and drop fields)."""
    from sglang.srt.managers.scheduler_components import batch_result_processor as module
    from sglang.srt.managers.scheduler_components.logprob_result_processor import (
        SchedulerLogprobResultProcessor,
    )

    known = {
        name: getattr(scheduler, name, None)
        for name in (
            "is_generation",
            "server_args",
            "disaggregation_mode",
            "enable_overlap",
            "enable_overlap_mlx",
            "model_config",
            "token_to_kv_pool_allocator",
            "tree_cache",
            "hisparse_coordinator",
            "req_to_token_pool",
            "decode_offload_manager",
            "metrics_collector",
            "metrics_reporter",
            "draft_worker",
            "model_worker",
            "output_streamer",
            "beam_coordinator",
        )
    }
    known["logprob_result_processor"] = SchedulerLogprobResultProcessor(model_config=scheduler.model_config)
    known["abort_request"] = scheduler.abort_request
    cls = module.SchedulerBatchResultProcessor
    fields = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in known.items() if name in fields})
