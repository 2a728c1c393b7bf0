"""The abstraction's observations: a record's observation and the comparison of two observations, whose fast
paths (one object per distinct record, a whole comparison before the report) must say what the plain ones say."""

from __future__ import annotations

import dataclasses

import pytest

import properties.abstraction as abstraction
from properties.abstraction import STALE, Observation, RecordObs
from properties.interning import Interned


def _record(**changes: int) -> RecordObs:
    fields = dict(status=2, row=1, protected_len=4, committed_len=6, allocated_len=8, inflight=0, extend_end=6)
    fields.update(changes)
    return RecordObs.of(**fields, tree_locked=False)  # type: ignore[arg-type]


def _observation(**changes: object) -> Observation:
    fields: dict[str, object] = dict(
        records={1: _record(), 2: _record(row=2)},
        free_rows=frozenset({3}),
        free_row_count=1,
        free_slot_count=16,
        tree_slot_count=4,
        generations=(1, 1, 0),
        group_open=False,
        pending_slot_count=0,
    )
    fields.update(changes)
    return Observation(**fields)  # type: ignore[arg-type]


def test_a_released_record_hides_its_stale_protected_length_and_a_held_one_shows_it() -> None:
    assert _record(row=0, allocated_len=0).protected_len == STALE
    assert _record(row=0, allocated_len=4).protected_len == 4
    assert _record(row=1, allocated_len=0).protected_len == 4


def test_a_record_observation_keeps_every_value_and_equal_values_share_one_object() -> None:
    first, again = _record(committed_len=6), _record(committed_len=6)
    assert first is again
    other = _record(committed_len=7)
    assert other is not first and other.committed_len == 7 and first.committed_len == 6


def test_the_record_cache_empties_at_its_limit_and_still_gives_each_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(abstraction, "_RECORDS", Interned(RecordObs, limit=3))
    records = [_record(extend_end=end) for end in range(10)]
    assert [r.extend_end for r in records] == list(range(10))
    assert len(abstraction._RECORDS) <= 3


def test_equal_observations_built_apart_have_no_difference() -> None:
    assert _observation().differences(_observation()) == []


def test_each_field_that_differs_is_reported_once() -> None:
    model = _observation()
    changes: dict[str, object] = {
        "records": {1: _record(allocated_len=9), 2: _record(row=2)},
        "free_rows": frozenset({2}),
        "free_row_count": 2,
        "free_slot_count": 12,
        "tree_slot_count": 8,
        "generations": (1, 2, 0),
        "group_open": True,
        "pending_slot_count": 4,
    }
    starts = {
        "records": "request 1:",
        "free_rows": "free rows:",
        "free_row_count": "free row count:",
        "free_slot_count": "free slots:",
        "tree_slot_count": "tree-owned slots:",
        "generations": "row generations:",
        "group_open": "free group",
        "pending_slot_count": "free group",
    }
    assert set(changes) == {f.name for f in dataclasses.fields(Observation)}
    for name, value in changes.items():
        found = model.differences(_observation(**{name: value}))
        assert len(found) == 1 and found[0].startswith(starts[name]), (name, found)


def test_a_request_only_one_side_knows_is_a_difference() -> None:
    pool = _observation(records={1: _record(), 2: _record(row=2), 5: _record(row=0, allocated_len=0)})
    assert [line.split(":")[0] for line in _observation().differences(pool)] == ["request 5"]
