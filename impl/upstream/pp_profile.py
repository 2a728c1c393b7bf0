"""PP dynamic-chunk profiling, run by upstream's own code over the target's pools.

Before its first request a pipeline-parallel server profiles prefill latency with synthetic requests: each is
admitted alone (`ScheduleBatch.init_new`, `prepare_for_extend`), run through the model and released. The requests
never touch the tree's keys (`last_node` is None, or the root's match of random ids), and the release is the seed
PR's subject: the hand-written five steps before PR #37167 (0.5.18), `release_kv_cache(is_insert=False)` after.

Upstream has it in two places: `SchedulerPPMixin.profile_and_init_predictor` (0.5.18, 0.5.19), which reads a whole
`Scheduler`, and `DynamicChunkSizer._profile_prefill_latency` (0.5.20 on), which takes its collaborators as
arguments. Either runs unmodified; only the model worker is a stand-in (`ModelRunnerStandIn`: the forward pass and
its input, `ForwardBatch.init_new`, for which nothing exists on CPU without a model), and numpy's generator is
seeded for the call so that the random prompts, and so every run, are reproducible.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

SEED = 0
# Upstream profiles `int(chunked_prefill_size * 1.25)` tokens (capped by the row on 0.5.20 on) and up to 128
# requests of it and less.
SCALE = 1.25


def profiled_len(chunked_prefill_size: int) -> int:
    """The longest synthetic prompt a profiling run admits."""
    return int(chunked_prefill_size * SCALE)


class ModelRunnerStandIn:
    """The model worker: a model config with the fields the proxy tensors read, a forward pass that computes
    nothing, no PP top-k or residual buffers."""

    def __init__(self, model_config: Any) -> None:
        self.model_config = model_config
        self.forwards = 0

    def forward(self, **_: Any) -> None:
        self.forwards += 1

    def get_pp_proxy_topk_size(self) -> None:
        return None

    def get_pp_proxy_residual_num_blocks(self) -> int:
        return 0


def _model_config(base: Any, context_len: int) -> Any:
    config = types.SimpleNamespace(**vars(base))
    config.hidden_size, config.dtype, config.context_len = 1, torch.float32, context_len
    return config


@contextlib.contextmanager
def _forward_input_stand_in(module: Any) -> Iterator[None]:
    """`ForwardBatch.init_new` in `module` answers with an empty forward batch for the call (the model's input),
    and no progress bar is drawn."""
    real, bar = module.ForwardBatch, module.tqdm
    module.ForwardBatch = types.SimpleNamespace(init_new=lambda batch, runner, **_: types.SimpleNamespace())
    module.tqdm = lambda items, **_: items  # its progress bar, on stderr
    try:
        yield
    finally:
        module.ForwardBatch, module.tqdm = real, bar


@contextlib.contextmanager
def _seeded() -> Iterator[None]:
    state = np.random.get_state()
    np.random.seed(SEED)
    try:
        yield
    finally:
        np.random.set_state(state)


def profile(target: Any, chunked_prefill_size: int) -> int:
    """Run upstream's profiling over `target`'s pools; returns how many synthetic requests it ran."""
    runner = ModelRunnerStandIn(_model_config(target.dialect.model_config(), target.config.width))
    try:
        from sglang.srt.managers.scheduler_components import dynamic_chunk_sizer as module

        run = _run_sizer
    except ImportError:
        from sglang.srt.managers import scheduler_pp_mixin as module

        run = _run_mixin
    with _seeded(), _forward_input_stand_in(module), _first_pp_rank():
        run(module, target, runner, chunked_prefill_size)
    return runner.forwards


def _run_sizer(module: Any, target: Any, runner: ModelRunnerStandIn, chunked_prefill_size: int) -> None:
    _sizer(module, target, runner, chunked_prefill_size)._profile_prefill_latency()


@contextlib.contextmanager
def _first_pp_rank() -> Iterator[None]:
    """The process's place in the pipeline for the call, where the release reads it from the runtime context."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:
        yield
        return
    with get_parallel().override(pp_rank=0):
        yield


def _sizer(module: Any, target: Any, runner: ModelRunnerStandIn, chunked_prefill_size: int) -> Any:
    """A `DynamicChunkSizer` over the target's pools (0.5.20 also takes its PP and world groups and its PP rank,
    unread here)."""
    values = {
        "model_runner": runner,
        "model_config": runner.model_config,
        "tree_cache": target.cache,
        "req_to_token_pool": target.req_to_token_pool,
        "token_to_kv_pool_allocator": target.allocator,
        "spec_algorithm": target.dialect.no_speculation,
        "chunked_prefill_size": chunked_prefill_size,
        "max_prefill_tokens": chunked_prefill_size,
        "page_size": target.config.page_size,
        "device": "cpu",
        "pp_group": None,
        "world_group": None,
        "pp_rank": 0,
    }
    accepted = inspect.signature(module.DynamicChunkSizer).parameters
    return module.DynamicChunkSizer(**{k: v for k, v in values.items() if k in accepted})


def _run_mixin(module: Any, target: Any, runner: ModelRunnerStandIn, chunked_prefill_size: int) -> None:
    """`profile_and_init_predictor` on the target's scheduler: the first PP rank of one, its fit left to run."""
    scheduler = target.host.scheduler
    profiling = {
        "pp_group": types.SimpleNamespace(is_first_rank=True),
        "tp_worker": types.SimpleNamespace(model_runner=runner),
        "chunked_prefill_size": chunked_prefill_size,
        "model_config": runner.model_config,
        "spec_algorithm": target.dialect.no_speculation,
        "device": "cpu",
    }
    # The scheduler's own values come back after the call: the prefill round reads them (a server profiles once,
    # at start, before it schedules anything).
    saved = {name: scheduler.__dict__[name] for name in profiling if name in scheduler.__dict__}
    scheduler.__dict__.update(profiling)
    try:
        type(scheduler).profile_and_init_predictor(scheduler)
    finally:
        for name in profiling:
            scheduler.__dict__.pop(name, None)
        scheduler.__dict__.update(saved)
