"""The three kernel backends agree slot for slot, and the oracle lays slots out as the page rules say."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from impl.alloc_kernels import MISSING_SLOT, alloc_decode, alloc_extend
from impl.triton_env import KERNELS_MODULE, TritonModeError, prepare_triton
from properties.vocabulary import num_new_pages

PAGE_SIZES = (1, 4, 16, 64)
MAX_PAGE_ID = 100_000
REPO_ROOT = Path(__file__).resolve().parents[2]
# The interpreter costs 5-40 ms a launch, so Triton sees few examples and torch many.
TRITON_SETTINGS = settings(max_examples=8, deadline=None)
TORCH_SETTINGS = settings(max_examples=150, deadline=None)

DrawInt = Callable[[int, int], int]


@dataclass
class Batch:
    """Inputs of one kernel call, as plain lists."""

    page_size: int
    prefix_lens: list[int]
    seq_lens: list[int]
    last_loc: list[int]
    free_pages: list[int]

    def tensors(self, device: str = "cpu") -> tuple[torch.Tensor, ...]:
        return tuple(
            torch.tensor(v, dtype=torch.int64, device=device)
            for v in (self.prefix_lens, self.seq_lens, self.last_loc, self.free_pages)
        )

    def new_pages(self) -> int:
        pre, seq, _, _ = self.tensors()
        return int(num_new_pages(pre, seq, self.page_size).sum())


def make_batch(draw: DrawInt, page_size: int, max_batch: int, decode: bool) -> Batch:
    """A batch whose prefixes often end mid-page and whose free list is sometimes too short."""
    batch_size = draw(1, max_batch)
    # Request i's prefix ends on page `first_open_page + i`; the free list holds only pages above those.
    first_open_page = draw(1, 1000)
    prefix_lens, seq_lens, last_loc = [], [], []
    for i in range(batch_size):
        pre = draw(0, 3) * page_size + draw(0, page_size - 1)
        seq = pre + 1 if decode else pre + draw(0, 2) * page_size + draw(0, page_size)
        prefix_lens.append(pre)
        seq_lens.append(seq)
        last_loc.append((first_open_page + i) * page_size + (pre - 1) % page_size if pre else -1)
    batch = Batch(page_size, prefix_lens, seq_lens, last_loc, [])
    wanted = batch.new_pages()
    free_count = draw(max(wanted - 2, 0), wanted + 2)
    first_free_page = first_open_page + batch_size
    batch.free_pages = random.Random(draw(0, 2**31)).sample(range(first_free_page, MAX_PAGE_ID), free_count)
    return batch


@st.composite
def batches(draw: st.DrawFn, decode: bool = False, max_batch: int = 6) -> Batch:
    page_size = draw(st.sampled_from(PAGE_SIZES))
    return make_batch(lambda lo, hi: draw(st.integers(lo, hi)), page_size, max_batch, decode)


def run_extend(batch: Batch, backend: str, device: str = "cpu") -> list[int]:
    pre, seq, last, free = batch.tensors(device)
    return alloc_extend(pre, seq, last, free, batch.page_size, backend).tolist()  # type: ignore[arg-type]


def run_decode(batch: Batch, backend: str, device: str = "cpu") -> list[int]:
    _, seq, last, free = batch.tensors(device)
    return alloc_decode(seq, last, free, batch.page_size, backend).tolist()  # type: ignore[arg-type]


def check_layout(batch: Batch, out: list[int]) -> None:
    """The page rules, read off the output: open page continued, new pages whole and from the head."""
    ps = batch.page_size
    assert len(out) == sum(batch.seq_lens) - sum(batch.prefix_lens)
    assert len(set(out)) == len(out), "a slot is handed out twice"
    slots = iter(out)
    new_pages: list[int] = []
    for pre, seq, last in zip(batch.prefix_lens, batch.seq_lens, batch.last_loc, strict=True):
        page_by_position_page: dict[int, int] = {}
        for pos in range(pre, seq):
            slot = next(slots)
            assert slot % ps == pos % ps, f"position {pos} lands at in-page offset {slot % ps}"
            if pre % ps and pos // ps == (pre - 1) // ps:
                assert slot == last + 1 + pos - pre, "the prefix's open page must be continued"
                continue
            if pos // ps not in page_by_position_page:
                page_by_position_page[pos // ps] = slot // ps
                new_pages.append(slot // ps)
            assert page_by_position_page[pos // ps] == slot // ps, "positions of one page share one page"
    assert new_pages == batch.free_pages[: len(new_pages)], "new pages must come from the head, in order"
    assert len(new_pages) == batch.new_pages()


def brute_new_pages(batch: Batch) -> int:
    """Pages spanned by `[prefix, seq)` minus the prefix's open page, counted position by position."""
    ps, total = batch.page_size, 0
    for pre, seq in zip(batch.prefix_lens, batch.seq_lens, strict=True):
        open_page = {(pre - 1) // ps} if pre % ps else set()
        total += len({pos // ps for pos in range(pre, seq)} - open_page)
    return total


@TORCH_SETTINGS
@given(batches())
def test_num_new_pages_counts_pages_outside_the_open_one(batch: Batch) -> None:
    assert batch.new_pages() == brute_new_pages(batch)


@TORCH_SETTINGS
@given(batches())
def test_oracle_extend_follows_the_page_rules(batch: Batch) -> None:
    out = run_extend(batch, "oracle")
    if len(batch.free_pages) >= batch.new_pages():
        assert MISSING_SLOT not in out
        check_layout(batch, out)
    else:
        assert MISSING_SLOT in out, "a short free list must show in the output"


@TORCH_SETTINGS
@given(batches())
def test_torch_extend_equals_oracle(batch: Batch) -> None:
    assert run_extend(batch, "torch") == run_extend(batch, "oracle")


@TRITON_SETTINGS
@given(batches())
def test_triton_extend_equals_oracle(batch: Batch) -> None:
    assert run_extend(batch, "triton") == run_extend(batch, "oracle")


@TORCH_SETTINGS
@given(batches(decode=True))
def test_oracle_decode_is_extend_by_one_token(batch: Batch) -> None:
    out = run_decode(batch, "oracle")
    assert out == run_extend(batch, "torch")
    if len(batch.free_pages) >= batch.new_pages():
        check_layout(batch, out)


@TORCH_SETTINGS
@given(batches(decode=True))
def test_torch_decode_equals_oracle(batch: Batch) -> None:
    assert run_decode(batch, "torch") == run_decode(batch, "oracle")


@TRITON_SETTINGS
@given(batches(decode=True))
def test_triton_decode_equals_oracle(batch: Batch) -> None:
    assert run_decode(batch, "triton") == run_decode(batch, "oracle")


def compare_triton_with_oracle(device: str, batches_per_page_size: int, wide_batch_size: int) -> None:
    """Seeded batches, plus one batch with a long run of new pages, through Triton and torch vs the oracle."""
    rng = random.Random(0)
    cases = [
        (make_batch(rng.randint, ps, 8, decode), decode)
        for ps in PAGE_SIZES
        for decode in (False, True)
        for _ in range(batches_per_page_size)
    ]
    # A run of over 1024 new-page tokens takes several trips round the block loop; over 256 requests
    # widen the masked prefix sums (an interpreted program costs ~10 ms, so only the GPU check goes wide).
    n = wide_batch_size
    wide = Batch(64, [0] * n, [40] * (n - 1) + [3000], [-1] * n, list(range(1, n + 50)))
    cases += [(wide, False)]
    for batch, decode in cases:
        run = run_decode if decode else run_extend
        expected = run(batch, "oracle")
        assert run(batch, "triton", device) == expected, f"triton on {device} differs for {batch}"
        assert run(batch, "torch", device) == expected, f"torch on {device} differs for {batch}"


def test_seeded_comparison_runs_interpreted_on_cpu() -> None:
    compare_triton_with_oracle("cpu", batches_per_page_size=1, wide_batch_size=3)


@pytest.mark.gpu
def test_compiled_kernels_equal_oracle_on_cuda() -> None:
    # This process may already hold interpreted kernels, so the compiled ones run in a fresh one.
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = (
        f"import sys; sys.path[:0] = [{str(REPO_ROOT)!r}, {str(Path(__file__).parent)!r}]; "
        "import test_alloc_kernels as t; t.compare_triton_with_oracle('cuda', 20, 300)"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def test_prepare_triton_refuses_cuda_once_kernels_are_interpreted() -> None:
    prepare_triton("cpu")
    import impl.triton_kernels as kernels

    assert kernels.INTERPRETED
    with pytest.raises(TritonModeError, match="TRITON_INTERPRET=1"):
        prepare_triton("cuda")


def test_prepare_triton_refuses_cpu_when_kernels_were_imported_compiled() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = (
        "import impl.triton_kernels\nfrom impl.triton_env import KERNELS_MODULE, TritonModeError, prepare_triton\n"
        "try:\n    prepare_triton('cpu')\nexcept TritonModeError as e:\n    print(e)\n    raise SystemExit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "impl.triton_kernels was imported without TRITON_INTERPRET=1" in done.stdout


def test_prepare_triton_refuses_cpu_when_the_knob_forces_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    monkeypatch.delitem(sys.modules, KERNELS_MODULE, raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # so that teardown restores whatever was set before
    triton.knobs.runtime.interpret = False  # an explicit knob wins over the environment
    try:
        with pytest.raises(TritonModeError, match="triton was configured without TRITON_INTERPRET=1"):
            prepare_triton("cpu")
    finally:
        del triton.knobs.runtime.interpret
