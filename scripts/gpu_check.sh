#!/usr/bin/env bash
# The checks that need a CUDA device: the gpu-marked tests, timings of the compiled Triton kernels (the paged
# allocator's extend/decode kernels against their torch path), the upstream target on CUDA for both pinned
# sglang versions (its gpu-marked tests and the lockstep on every shape), and the page-ownership check.
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

# The upstream target on CUDA, for each pinned version: its gpu-marked tests (each shape's lockstep in a child
# process without TRITON_INTERPRET), then the lockstep `ci` profile on every shape it supports, bounded to
# GPU_CASES test cases per pass (known findings drop their ops and the run goes on, as in `make verify-sglang`).
GPU_CASES=${GPU_CASES:-100}
for venv in ${SGLANG_VENVS:-.venv-sglang-0.5.23 .venv-sglang-0.5.18}; do
    if [ ! -x "$venv/bin/python" ]; then
        echo "gpu-check: $venv is missing; build it with make sglang-setup" >&2
        exit 1
    fi
    echo "gpu-check: upstream target on CUDA, $venv: gpu-marked tests"
    "$venv/bin/python" -W ignore::UserWarning -m pytest -m gpu -o addopts="" -q -rs tests/upstream
    echo "gpu-check: upstream target on CUDA, $venv: lockstep, $GPU_CASES cases per pass"
    GPU_CASES=$GPU_CASES "$venv/bin/python" -W ignore::UserWarning - <<'PYTHON'
import os
import sys
import tempfile
from pathlib import Path

from fuzz.targets import target_problem
from fuzz.upstream_verify import ROOT, Report, fuzz_pool, load_findings, upstream_pools
from impl.upstream.dialects import supported_version

# CUDA first: probing the installed sglang imports it, which fixes Triton's mode for the process.
report, version = Report(), supported_version("cuda")
findings = load_findings(ROOT / "upstream" / "findings.json")
out = Path(tempfile.mkdtemp(prefix="kvlife-gpu-"))
for name, config in upstream_pools("cuda").items():
    on_cuda = {**config, "device": "cuda", "kernel_backend": "triton"}
    problem = target_problem(on_cuda)
    if problem:
        report.mismatch(f"{name}: cannot run on CUDA: {problem}")
        continue
    fuzz_pool(name, on_cuda, findings, version, out / name, report, cases=int(os.environ["GPU_CASES"]))
print(f"gpu-check: sglang {version} on CUDA: {len(report.problems)} mismatches (counterexamples under {out})")
sys.exit(1 if report.problems else 0)
PYTHON
done

if [ -f bench/page_check_bench.py ]; then
    echo "gpu-check: page-ownership check"
    "$PY" -m bench.page_check_bench --quick
fi
echo "gpu-check: all GPU checks passed"
