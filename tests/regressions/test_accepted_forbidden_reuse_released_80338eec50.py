"""Regression: accepted-forbidden reuse_released at step 2: the pool accepted reuse_released(req=0, row=4, n=1), which the contract forbids in this state; afterwards row-owner: request 0 holds row 4, which is in the

Emitted by `python -m fuzz emit` from a counterexample; the trace below must pass on the pool.
Provenance: commit cb58bcd, hypothesis 6.170.17, profile ci, source hypothesis.
"""

from fuzz.emit import replay_regression

TRACE = '{"config": {"cache": "chunk", "device": "cpu", "faults": ["legacy_reuse_guard"], "page_size": 1, "rows": 4, "speculative": false, "target": "reference", "tokens": 64, "width": 32}, "failure": {"id": "reuse_released", "kind": "accepted-forbidden", "message": "the pool accepted reuse_released(req=0, row=4, n=1), which the contract forbids in this state; afterwards row-owner: request 0 holds row 4, which is in the free list; live-row-owned: request 0 holds row 4, which is in the free list; row-conservation: 4 free rows + 1 held rows != 4 rows; token-conservation: 63 free + 0 tree-owned + 2 request-owned slots != 64 slots; page-ownership: page 1 owned and free: held by row 4, free; page-ownership: free + tree + owned pages exceed the 64 pages by 1", "step": 2}, "format": "kvlife-trace", "meta": {"commit": "cb58bcd", "hypothesis": "6.170.17", "profile": "ci", "source": "hypothesis"}, "seed": null, "steps": [{"args": {"family": 0, "n": 1, "prefix": 0, "prompt": 2, "req": 0}, "choice": {"dup": 0, "row": 4}, "op": "admit"}, {"args": {"req": 0}, "choice": {}, "op": "pp_release_manual"}, {"args": {"n": 1, "req": 0, "row": 4}, "choice": {}, "op": "reuse_released"}], "version": 1}'


def test_accepted_forbidden_reuse_released_80338eec50() -> None:
    replay_regression(TRACE)
