"""Finishes on the upstream target run upstream's own check (`Req.update_finish_state`, its `finished_len` and
`owned_kv_len()`) and release, each kind armed on the request as SGLang's tokenizer manager would leave it; an
in-process change to the check (for the test only) is a finding, which a finish re-enacted in the adapter would
not show."""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("sglang") is None:
    pytest.skip(
        "needs upstream sglang, which the main venv deliberately lacks; run `make sglang-test`",
        allow_module_level=True,
    )

from impl.upstream.stops import STOP_TEXT, StopStringTokenizer
from properties.vocabulary import FINISH_BY
from tests.finish_scenarios import (
    decode_finish_releases_in_its_pass,
    decoding,
    lockstep,
    profiling_gives_everything_back,
    readmitted_after_a_trimmed_finish_owns_all_it_commits,
    stop_at_the_run_end_keeps_it_all,
    stop_outside_the_run_is_refused,
    trimmed_run_keeps_only_through_the_stop,
)
from tests.upstream.known import findings_on

KINDS = range(len(FINISH_BY))


def _trims() -> bool:
    from impl.upstream.dialects import supported_version

    return "stop-tail-cached" not in findings_on(supported_version())


@pytest.mark.parametrize("by", KINDS)
def test_upstream_keeps_only_through_the_stop(by: int) -> None:
    if _trims():
        trimmed_run_keeps_only_through_the_stop("sglang", by)
        return
    # The known finding stop-tail-cached: this release keys the whole verified run, past the stop.
    lock = lockstep("sglang")
    decoding(lock)
    failure = lock.step("spec_finish", {"req": 0, "accepted": 5, "stop": 2, "by": by})
    assert failure is not None and (failure.kind, failure.id) == ("illegal-choice", "spec_finish"), failure


@pytest.mark.parametrize("by", KINDS)
def test_upstream_keeps_a_run_whose_last_token_stops(by: int) -> None:
    stop_at_the_run_end_keeps_it_all("sglang", by)


@pytest.mark.parametrize("by", KINDS)
def test_upstream_finishes_a_decode_in_its_result_pass(by: int) -> None:
    decode_finish_releases_in_its_pass("sglang", by)


def test_upstream_refuses_a_stop_outside_the_run() -> None:
    stop_outside_the_run_is_refused("sglang")


def test_the_tokenizer_stand_in_spells_the_stop_string_only_at_the_stop() -> None:
    tokenizer = StopStringTokenizer(7)
    assert tokenizer.decode([1, 7, 3]) == "." + STOP_TEXT + "."
    assert STOP_TEXT not in tokenizer.decode([1, 3, 5, 9])


def test_a_check_that_ignores_the_stop_token_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang.srt.managers.schedule_batch import Req

    monkeypatch.setattr(Req, "_check_token_based_finish", lambda self, *a, **k: False)
    lock = lockstep("sglang")
    decoding(lock)
    failure = lock.step("spec_finish", {"req": 0, "accepted": 3, "stop": 2, "by": FINISH_BY.index("stop_token")})
    assert failure is not None, "a stop token the check ignores went unseen"


@pytest.mark.parametrize("cache", ["chunk", "radix"])
def test_upstream_pp_profiling_gives_everything_back(cache: str) -> None:
    from impl.upstream.dialects import supported_version

    if cache == "chunk" or "pp-profile-unlocks-none" not in findings_on(supported_version()):
        profiling_gives_everything_back("sglang", cache)
        return
    # The known finding pp-profile-unlocks-none: the release unlocks the synthetic request's absent tree node.
    lock = lockstep("sglang", speculative=False)
    failure = lock.step("pp_profile", {"quarter": 2})
    assert failure is not None and (failure.kind, failure.id) == ("crash", "pp_profile"), failure
    assert "KeyError" in failure.message, failure.message


def test_a_profiling_that_keeps_its_requests_kv_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiling's release taken out, in whichever of upstream's two homes this release keeps it: the slots
    its synthetic requests took stay taken, which the model's whole pool shows."""
    try:
        from sglang.srt.managers.scheduler_components import dynamic_chunk_sizer as module
    except ImportError:
        from sglang.srt.managers import scheduler_pp_mixin as module
    lock = lockstep("sglang", speculative=False)
    if hasattr(module, "release_kv_cache"):
        monkeypatch.setattr(module, "release_kv_cache", lambda *a, **k: None)
    else:  # 0.5.18's hand-written release frees the slots through the allocator itself
        monkeypatch.setattr(lock.target.allocator, "free", lambda *a, **k: None)
    failure = lock.step("pp_profile", {"quarter": 2})
    assert failure is not None, "a profiling that kept its KV went unseen"


def test_upstream_readmits_after_a_trimmed_finish_with_no_stop() -> None:
    # Where the release keys the whole run (known finding stop-tail-cached) the stop ends the run: still a finish
    # that set `finished_len`, which the re-admission must drop.
    readmitted_after_a_trimmed_finish_owns_all_it_commits("sglang", 2 if _trims() else 5)
