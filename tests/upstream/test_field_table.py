"""The field inventory's data is well formed, and `docs/upstream-api.md` §13 is what `upstream/field_table.py`
writes from it (the table is generated, never typed). Main venv: reads no sglang."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from impl.upstream.fields import CLASSES, KINDS, ONLY_IN, VERSIONS, fields_of

ROOT = Path(__file__).resolve().parents[2]


def _field_table() -> ModuleType:
    """`upstream/field_table.py` as a module (a script, not a package member)."""
    spec = importlib.util.spec_from_file_location("field_table", ROOT / "upstream" / "field_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_section_is_what_the_generator_writes() -> None:
    table = _field_table()
    content = (ROOT / "docs" / "upstream-api.md").read_text()
    start, end = content.index(table.BEGIN) + len(table.BEGIN), content.index(table.END)
    assert content[start:end] == "\n" + table.text(), "run `python upstream/field_table.py --write`"


def test_the_generator_counts_every_entry_once() -> None:
    """The summary's last row adds up to the inventory's entries, kind by kind."""
    total = sum(len(entries) for _, entries in CLASSES.values())
    last = _field_table().summary().splitlines()[-1].split("|")
    assert int(last[3]) == total
    assert sum(int(cell) for cell in last[4 : 4 + len(KINDS)]) == total


def test_every_entry_has_a_kind_and_a_reason() -> None:
    bad = [
        (cls, name)
        for cls, (_, entries) in CLASSES.items()
        for name, entry in entries.items()
        if entry.kind not in KINDS or not entry.why or (entry.kept and entry.kind not in ("configured", "irrelevant"))
    ]
    assert bad == []


def test_version_only_fields_are_listed_and_belong_to_one_version() -> None:
    """A field named as one version's own is an entry of its class, of a class both versions build, and no other
    version claims it; so every entry is a field of some supported version."""
    for version, classes in ONLY_IN.items():
        for cls, names in classes.items():
            versions, entries = CLASSES[cls]
            assert version in versions and set(versions) == set(VERSIONS), (version, cls)
            assert names <= set(entries), (version, cls, sorted(names - set(entries)))
            for other in set(VERSIONS) - {version}:
                assert not names & ONLY_IN[other].get(cls, frozenset()), (cls, version, other)
    for cls, (_, entries) in CLASSES.items():
        assert set(entries) == set().union(*(fields_of(cls, v) for v in VERSIONS)), cls
