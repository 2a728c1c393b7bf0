"""Time the whole-pool page check per backend on a production-size pool, and the input bytes it reads per second.

Run from the repository root: `python -m bench.page_check_bench [--quick]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from properties.page_check import PageSnapshot, check_pages

H200_PEAK_BYTES_PER_S = 4.8e12
SEED = 20240601


@dataclass(frozen=True)
class PoolSize:
    """One synthetic pool: live rows, row width in tokens, real pages, page size, and how pages are held."""

    rows: int
    width: int
    num_pages: int
    page_size: int
    tree_share: float = 0.30  # of pages held by the prefix tree
    own_share: float = 0.55  # of pages held by live requests' own ranges; the rest are free
    branch_pages: int = 1024  # pages per tree branch; each live request's prefix is a head of one branch

    def describe(self) -> str:
        return f"{self.rows} rows x {self.width} width, {self.num_pages:,} pages of {self.page_size}"


FULL = PoolSize(rows=4096, width=32768, num_pages=2_000_000, page_size=1)
QUICK = PoolSize(rows=256, width=4096, num_pages=65_536, page_size=1)


def build_pool(size: PoolSize, seed: int = SEED) -> PageSnapshot:
    """A consistent pool: every row is live, a tree-branch prefix then its own pages; the other pages are free."""
    gen = torch.Generator().manual_seed(seed)
    ps, live = size.page_size, size.rows
    perm = torch.randperm(size.num_pages, generator=gen) + 1
    branches = int(size.num_pages * size.tree_share) // size.branch_pages
    tree = perm[: branches * size.branch_pages]
    owned = int(size.num_pages * size.own_share)
    cuts = torch.sort(torch.randint(0, owned + 1, (live + 1,), generator=gen)).values
    cuts[0], cuts[-1] = 0, owned
    # Prefix and own range must both fit the row: cap each at half its width.
    cap = size.width // (2 * ps)
    own_lens = torch.diff(cuts).clamp(max=cap)
    prefix_lens = torch.randint(0, size.branch_pages + 1, (live,), generator=gen).clamp(max=cap) * int(branches > 0)
    own_pages = perm[tree.numel() : tree.numel() + int(own_lens.sum())]
    free = perm[tree.numel() + own_pages.numel() :]
    protected = prefix_lens * ps
    slack = torch.randint(0, ps, (live,), generator=gen) * (own_lens > 0)
    allocated = protected + own_lens * ps - slack
    branch_of = torch.randint(0, max(branches, 1), (live,), generator=gen)
    row_pages = _row_pages(
        tree.view(branches, size.branch_pages), branch_of, own_pages, own_lens, protected, allocated, ps
    )
    table = torch.zeros((live + 1, size.width), dtype=torch.int32)
    rows = torch.arange(1, live + 1)
    entries, pos = _ragged(allocated)
    table.view(-1)[rows[entries] * size.width + pos] = (row_pages * ps + pos % ps).int()
    half = free.numel() // 2
    return PageSnapshot(table, rows, protected, allocated, free[:half], free[half:], tree, size.num_pages, ps)


def _ragged(lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For positions [0, lens_i) of every i, concatenated: i and the position."""
    entries = torch.repeat_interleave(torch.arange(lens.numel()), lens)
    return entries, torch.arange(entries.numel()) - (torch.cumsum(lens, 0) - lens)[entries]


def _row_pages(
    branches: torch.Tensor,
    branch_of: torch.Tensor,
    own_pages: torch.Tensor,
    own_lens: torch.Tensor,
    protected: torch.Tensor,
    allocated: torch.Tensor,
    ps: int,
) -> torch.Tensor:
    """The page of every position [0, A) of every row, in `_ragged(allocated)` order."""
    entries, pos = _ragged(allocated)
    in_prefix = pos < protected[entries]
    prefix_page = branches[branch_of[entries], (pos // ps).clamp(max=branches.shape[1] - 1)] if len(branches) else 0
    own_index = (torch.cumsum(own_lens, 0) - own_lens)[entries] + (pos - protected[entries]) // ps
    own_page = own_pages[own_index.clamp(0, max(own_pages.numel() - 1, 0))] if own_pages.numel() else 0
    return torch.where(in_prefix, prefix_page, own_page)


def input_bytes(snap: PageSnapshot) -> int:
    """Bytes a full check must read: row entries [0, A) of live rows, the records and the three page lists."""
    row_entries = int(snap.allocated_lens.sum()) * snap.req_to_token.element_size()
    records = 3 * snap.live_rows.numel() * 8
    lists = (snap.free_pages.numel() + snap.release_pages.numel() + snap.tree_pages.numel()) * 8
    return row_entries + records + lists


def time_s(run: Callable[[], object], repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    """Median wall time of `repeats` runs after one warm-up run."""
    run()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def report(label: str, seconds: float, nbytes: int, extra: str = "") -> None:
    print(f"  {label:<32} {seconds * 1e3:>10.1f} ms/check {nbytes / seconds / 1e9:>8.3f} GB/s read  {extra}")


def bench_cpu(size: PoolSize) -> None:
    """The oracle once and the torch path (at the default thread count and at one thread) on the CPU."""
    snap = build_pool(size)
    nbytes = input_bytes(snap)
    entries = int(snap.allocated_lens.sum())
    print(f"pool: {size.describe()}; {entries:,} row entries read; {nbytes / 1e6:.1f} MB input")
    print(f"cpu: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    start = time.perf_counter()
    expected = check_pages(snap, "oracle")
    oracle_s = time.perf_counter() - start
    agree = check_pages(snap, "torch") == expected
    print(f"  findings: {len(expected.violations)} violations, gap {expected.conservation_gap_pages} pages; ", end="")
    print(f"torch identical to oracle: {agree}")
    report("oracle (python loop, one run)", oracle_s, nbytes)
    default_threads = torch.get_num_threads()
    for threads in sorted({default_threads, 1}, reverse=True):
        torch.set_num_threads(threads)
        torch_s = time_s(lambda: check_pages(snap, "torch"), repeats=5)
        report(
            f"torch (cpu, {threads} thread(s))", torch_s, nbytes, f"{oracle_s / torch_s:.0f}x faster than the oracle"
        )
    torch.set_num_threads(default_threads)


def bench_cuda(size: PoolSize) -> None:
    """The torch path and the Triton kernels on the GPU, with the fraction of H200 peak bandwidth reached."""
    from properties.page_check_triton import triton_page_stats

    snap = build_pool(size).to("cuda")
    nbytes = input_bytes(snap)
    agree = check_pages(snap, "triton") == check_pages(snap, "torch")
    print(f"cuda ({torch.cuda.get_device_name()}): triton and torch findings identical: {agree}")
    runs: dict[str, Callable[[], object]] = {
        "torch (cuda)": lambda: check_pages(snap, "torch"),
        "triton, full check (cuda)": lambda: check_pages(snap, "triton"),
        "triton, per-page counts only": lambda: triton_page_stats(snap),
    }
    for label, run in runs.items():
        seconds = time_s(run, repeats=20, sync=torch.cuda.synchronize)
        report(label, seconds, nbytes, f"{nbytes / seconds / H200_PEAK_BYTES_PER_S:.1%} of H200 peak")


def run(quick: bool) -> None:
    """The page-check benchmark on the full (or, with `quick`, a small) pool."""
    size = QUICK if quick else FULL
    bench_cpu(size)
    if torch.cuda.is_available():
        bench_cuda(size)
    else:
        print("cuda: no device present; Triton kernel not timed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help=f"a small pool ({QUICK.describe()})")
    run(parser.parse_args().quick)


if __name__ == "__main__":
    main()
