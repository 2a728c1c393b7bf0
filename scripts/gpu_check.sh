#!/usr/bin/env bash
# The checks that need a CUDA device: the gpu-marked tests, then timings of the compiled Triton kernels
# (the paged allocator's extend/decode kernels against their torch path, and the page-ownership check).
# Exit status: 0 all passed; pytest's status when a test failed; 3 when no CUDA device is present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
NO_CUDA=3

# Compiled kernels need a process that never set the interpreter (TRITON_INTERPRET is for CPU tensors).
unset TRITON_INTERPRET

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu-check: NO CUDA DEVICE: torch sees no CUDA device here, so no GPU check ran" >&2
    exit "$NO_CUDA"
fi
"$PY" -c 'import torch; print(f"gpu-check: {torch.cuda.get_device_name()}, torch {torch.__version__}")'

echo "gpu-check: gpu-marked tests"
"$PY" -m pytest -m gpu -o addopts="" -q -rs tests

echo "gpu-check: compiled allocator kernels (median of 50 launches, synchronized)"
"$PY" - <<'PYTHON'
import statistics
import time

import torch

from impl.alloc_kernels import alloc_decode, alloc_extend


def batch(batch_size: int, page_size: int, decode: bool) -> tuple[torch.Tensor, ...]:
    """A batch whose prefixes end on distinct open pages, and a free list long enough for every request."""
    gen = torch.Generator().manual_seed(batch_size * 131 + page_size)
    prefix = torch.randint(1, 4096, (batch_size,), generator=gen)
    seq = prefix + (1 if decode else torch.randint(1, 512, (batch_size,), generator=gen))
    last_loc = (torch.arange(batch_size) + 1) * page_size + (prefix - 1) % page_size
    free = torch.arange(batch_size + 1, batch_size + 1 + int((seq // page_size + 2).sum()))
    return tuple(t.to(torch.int64).cuda() for t in (prefix, seq, last_loc, free))


def median_us(run) -> float:
    run()
    torch.cuda.synchronize()
    samples = []
    for _ in range(50):
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


for page_size in (4, 16, 64):
    for batch_size in (1, 64, 1024):
        for decode in (False, True):
            prefix, seq, last_loc, free = batch(batch_size, page_size, decode)
            runs = {
                backend: (lambda b=backend: alloc_decode(seq, last_loc, free, page_size, b)) if decode
                else (lambda b=backend: alloc_extend(prefix, seq, last_loc, free, page_size, b))
                for backend in ("triton", "torch")
            }
            same = torch.equal(runs["triton"](), runs["torch"]())
            times = "  ".join(f"{name} {median_us(run):8.1f} us" for name, run in runs.items())
            kind = "decode" if decode else "extend"
            print(f"  alloc_{kind:6} page {page_size:2} batch {batch_size:4}: {times}  same output: {same}")
            assert same, "the compiled kernel and the torch path disagree"
PYTHON

if [ -f bench/page_check_bench.py ]; then
    echo "gpu-check: page-ownership check"
    "$PY" -m bench.page_check_bench --quick
fi
echo "gpu-check: all GPU checks passed"
