"""One row-pool event at a time, on the real unit and on `RowModel`, judged by the unit's `RowContract`.

Each `apply` calls the unit, judges what it returned (rows, None, an assert) against the model's verdict and
updates the model; `observe` then compares everything the unit shows (free rows, each request's row, every
row's generation, the `req_to_token` table, the alloc-rows hook) with the model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from fuzz.components.contract import RowContract
from fuzz.components.events import (
    Event,
    RowAlloc,
    RowAllocRows,
    RowAllocStale,
    RowClear,
    RowFree,
    RowFreeRowless,
    RowFreeRows,
    RowQuery,
    RowStale,
    RowWrite,
)
from fuzz.components.models import RowModel
from fuzz.components.refusal import Problem, attempt

STALE_COMMITTED_LEN = 3  # the committed length a release leaves stale on a record (any positive length)


class RowRun:
    """A row-pool unit and its model, stepped together."""

    def __init__(self, unit: Any, contract: RowContract, coverage: Counter[str]) -> None:
        self.unit, self.contract, self.coverage = unit, contract, coverage
        self.model = RowModel.fresh(unit.rows, unit.width)
        self.reqs: dict[int, Any] = {}
        self._handlers: dict[type[Event], Callable[[Any], Problem | None]] = {
            RowAlloc: self._alloc,
            RowAllocStale: self._alloc_stale,
            RowFree: self._free,
            RowFreeRowless: self._free_rowless,
            RowStale: self._stale,
            RowAllocRows: self._alloc_rows,
            RowFreeRows: self._free_rows,
            RowWrite: self._write,
            RowClear: self._clear,
            RowQuery: self._query,
        }

    def apply(self, event: Event) -> Problem | None:
        return self._handlers[type(event)](event)

    # -- state ------------------------------------------------------------------------------------------------

    def state(self) -> tuple[object, ...]:
        """Everything the unit shows, for a refusal's before/after comparison."""
        rows = tuple(self.unit.row(req) for req in self.reqs.values())
        free = sorted(self.unit.free_list())
        return free, self.unit.available_size(), rows, self.unit.generations(), self.unit.table()

    def observe(self) -> Problem | None:
        m, unit = self.model, self.unit
        checks = [
            (unit.available_size() == len(m.free), f"available_size {unit.available_size()} != {len(m.free)} free"),
            (sorted(unit.free_list()) == sorted(m.free), f"free rows {sorted(unit.free_list())} != {sorted(m.free)}"),
            (unit.table() == m.table, "req_to_token differs from the writes made"),
        ]
        for ok, message in checks:
            if not ok:
                return "mismatch", message
        moved = self._generations_unchanged()
        if moved:
            return moved
        for ref, req in self.reqs.items():
            expected = m.stale.get(ref, m.req_rows.get(ref))
            if unit.row(req) != expected:
                return "mismatch", f"request r{ref} names row {unit.row(req)}, the model says {expected}"
        calls = unit.take_hook_calls()
        if calls:
            return "mismatch", f"alloc-rows hook called with {calls} outside a hand-out"
        problem = m.self_check()
        return None if problem is None else ("model", problem)

    def _generations_unchanged(self) -> Problem | None:
        """Outside a hand-out no generation moves; one that falls lets a later holder repeat an earlier pair."""
        for row, (now, last) in enumerate(zip(self.unit.generations(), self.model.last_gen, strict=True)):
            if now < last:
                return "generation", (
                    f"row {row}'s generation fell from {last} to {now}: its next holders can carry (row {row}, "
                    f"generation {now + 1}..{last}), pairs that named earlier holders"
                )
            if now != last:
                return "generation", f"row {row}'s generation moved from {last} to {now} outside a hand-out"
        return None

    # -- hand-outs --------------------------------------------------------------------------------------------

    def _judge_rows(self, rows: list[int], holders: list[int]) -> Problem | None:
        """Rows handed to `holders` (references, one each): distinct, in range, free, and each at a generation
        higher than the row's last and never paired with another holder."""
        m, generations = self.model, self.unit.generations()
        for index, (row, ref) in enumerate(zip(rows, holders, strict=True)):
            if not 1 <= row <= m.rows:
                return "illegal-choice", f"row {row} is out of range 1..{m.rows}"
            if row in rows[:index]:
                return "illegal-choice", f"row {row} handed out twice in one call"
            if row not in m.free:
                return "illegal-choice", f"row {row} is not free (held by {m.held().get(row)})"
            named = m.pair_holder.get((row, generations[row]))
            if named is not None and named != ref:
                return "generation", f"(row {row}, generation {generations[row]}) names holder {named} and {ref}"
            if generations[row] <= m.last_gen[row]:
                return (
                    "generation",
                    f"row {row} handed out at generation {generations[row]}, not above {m.last_gen[row]}",
                )
        for row, ref in zip(rows, holders, strict=True):
            m.free.discard(row)
            m.last_gen[row] = generations[row]
            m.pair_holder[(row, generations[row])] = ref
        return None

    def _judge_hook(self, rows: list[int]) -> Problem | None:
        calls = self.unit.take_hook_calls()
        if calls is None:
            return None
        reported = sorted(row for call in calls for row in call)
        if reported != sorted(rows):
            return "mismatch", f"alloc-rows hook reported {reported}, rows handed out {sorted(rows)}"
        return None

    def _refused(self, before: tuple[object, ...], what: str, path: str) -> Problem | None:
        """A refusal the model expects: it must change nothing, and report no hand-out to the hook."""
        if self.unit.take_hook_calls() or self.state() != before:
            return "refusal-changed-state", f"{what} was refused but changed the pool"
        self.coverage[path] += 1
        return None

    def _new_req(self) -> int:
        ref = self.model.new_ref()
        self.reqs[ref] = self.unit.new_req(ref)
        self.model.req_rows[ref] = None
        return ref

    def _alloc(self, event: RowAlloc) -> Problem | None:
        m = self.model
        batch: list[int] = []
        for pick in event.picks:
            candidates = list(m.req_rows)
            ref = self._new_req() if pick is None or not candidates else candidates[pick % len(candidates)]
            if ref not in batch:
                batch.append(ref)
        fresh = [ref for ref in batch if m.req_rows[ref] is None]
        before = self.state()
        result, refusal = attempt(lambda: self.unit.alloc([self.reqs[ref] for ref in batch]))
        short = len(fresh) > len(m.free)
        if refusal is not None:
            return "refused-legal", f"alloc of {len(batch)} requests asserted: {refusal}"
        if result is None:
            if not short:
                return "refused-legal", f"alloc returned None for {len(fresh)} new rows with {len(m.free)} free"
            return self._refused(before, "alloc", "rows.alloc:None")
        self.coverage[f"rows.alloc:batch={len(batch)}"] += 1
        return self._bind(batch, fresh, list(result))

    def _bind(self, batch: list[int], fresh: list[int], result: list[int]) -> Problem | None:
        m = self.model
        if len(result) != len(batch):
            return "mismatch", f"alloc returned {len(result)} rows for {len(batch)} requests"
        for ref, row in zip(batch, result, strict=True):
            if self.unit.row(self.reqs[ref]) != row:
                return (
                    "mismatch",
                    f"alloc returned row {row} for r{ref}, whose record names {self.unit.row(self.reqs[ref])}",
                )
            if ref not in fresh and row != m.req_rows[ref]:
                return "illegal-choice", f"r{ref} reused its row {m.req_rows[ref]} but got row {row}"
        rows = [row for ref, row in zip(batch, result, strict=True) if ref in fresh]
        problem = self._judge_rows(rows, fresh) or self._judge_hook(rows)
        if problem:
            return problem
        for ref, row in zip(fresh, rows, strict=True):
            m.req_rows[ref] = row
            self.unit.hold(self.reqs[ref], 1)  # what alloc_for_extend writes after the row is bound
        return None

    def _alloc_stale(self, event: RowAllocStale) -> Problem | None:
        if not self.model.stale:
            problem = self._stale(RowStale(event.pick, event.committed))
            if problem or not self.model.stale:
                return problem
        stale = list(self.model.stale)
        ref = stale[event.pick % len(stale)]
        batch = [ref, *(self._new_req() for _ in range(event.fresh))]
        before = self.state()
        result, refusal = attempt(lambda: self.unit.alloc([self.reqs[r] for r in batch]))
        if refusal is None:
            return (
                "accepted-forbidden",
                f"alloc let released r{ref} keep its stale row {self.model.stale[ref]} ({result})",
            )
        return self._refused(before, "alloc of a released record naming a row", "rows.alloc:stale-refused")

    def _alloc_rows(self, event: RowAllocRows) -> Problem | None:
        m, need = self.model, event.need
        before = self.state()
        result, refusal = attempt(lambda: self.unit.alloc_rows(need))
        if refusal is not None:
            return "refused-legal", f"alloc_rows({need}) asserted: {refusal}"
        if result is None:
            if need <= len(m.free):
                return "refused-legal", f"alloc_rows({need}) returned None with {len(m.free)} free"
            return self._refused(before, f"alloc_rows({need})", "alloc_rows:None")
        if len(result) != need:
            return "mismatch", f"alloc_rows({need}) returned {len(result)} rows"
        ref = m.new_ref()
        problem = self._judge_rows(list(result), [ref] * need) or self._judge_hook(list(result))
        if problem:
            return problem
        if result:
            m.blocks[ref] = list(result)
        self.coverage["alloc_rows:ok"] += 1
        return None

    # -- frees ------------------------------------------------------------------------------------------------

    def _free(self, event: RowFree) -> Problem | None:
        live = self.model.live()
        if not live:
            return None
        ref = live[event.pick % len(live)]
        _, refusal = attempt(lambda: self.unit.free(self.reqs[ref]))
        if refusal is not None:
            return "refused-legal", f"free of r{ref} holding row {self.model.req_rows[ref]} asserted: {refusal}"
        row = self.model.req_rows[ref]
        assert row is not None
        self.model.free.add(row)
        self.model.req_rows[ref] = None
        self.coverage["rows.free"] += 1
        return None

    def _free_rowless(self, event: RowFreeRowless) -> Problem | None:
        rowless = self.model.rowless()
        if not rowless:
            return None
        ref = rowless[event.pick % len(rowless)]
        before = self.state()
        _, refusal = attempt(lambda: self.unit.free(self.reqs[ref]))
        if refusal is None:
            return "accepted-forbidden", f"free of r{ref}, which holds no row, was accepted"
        return self._refused(before, "free of a request without a row", "rows.free:rowless-refused")

    def _stale(self, event: RowStale) -> Problem | None:
        live = self.model.live()
        if not live:
            return None
        ref = live[event.pick % len(live)]
        row = self.model.req_rows.pop(ref)
        assert row is not None
        _, refusal = attempt(lambda: self.unit.free(self.reqs[ref]))
        if refusal is not None:
            return "refused-legal", f"free of r{ref} holding row {row} asserted: {refusal}"
        self.unit.make_stale(self.reqs[ref], row, STALE_COMMITTED_LEN if event.committed else 0)
        self.model.free.add(row)
        self.model.stale[ref] = row
        self.coverage[f"rows.stale:committed={event.committed}"] += 1
        return None

    def _free_rows(self, event: RowFreeRows) -> Problem | None:
        blocks = list(self.model.blocks)
        if not blocks:
            return None
        ref = blocks[event.pick % len(blocks)]
        block = self.model.blocks[ref]
        rows, rest = block[: 1 + event.count % len(block)], block[1 + event.count % len(block) :]
        _, refusal = attempt(lambda: self.unit.free_rows(rows))
        if refusal is not None:
            return "refused-legal", f"free_rows({rows}) asserted: {refusal}"
        self.model.free.update(rows)
        if rest:
            self.model.blocks[ref] = rest
        else:
            del self.model.blocks[ref]
        self.coverage["free_rows"] += 1
        return None

    # -- the rest ---------------------------------------------------------------------------------------------

    def _write(self, event: RowWrite) -> Problem | None:
        live, m = self.model.live(), self.model
        if not live:
            return None
        ref = live[event.pick % len(live)]
        row = m.req_rows[ref]
        assert row is not None
        start = event.start % m.width
        values = [event.seed * 100 + i for i in range(1 + event.length % (m.width - start))]
        _, refusal = attempt(lambda: self.unit.write(row, start, values))
        if refusal is not None:
            return "refused-legal", f"write to row {row} asserted: {refusal}"
        m.table[row][start : start + len(values)] = values
        self.coverage["rows.write"] += 1
        return None

    def _clear(self, event: RowClear) -> Problem | None:
        _, refusal = attempt(self.unit.clear)
        if refusal is not None:
            return "refused-legal", f"clear asserted: {refusal}"
        self.model.retire_all()
        self.reqs = {}
        if not self.contract.generation_survives_clear:
            # This contract lets clear reset generations: a new epoch, judged from what clear left.
            self.model.last_gen = self.unit.generations()
            self.model.pair_holder = {}
        self.coverage["rows.clear"] += 1
        return None

    def _query(self, event: RowQuery) -> Problem | None:
        names = self.unit.queries
        if not names:
            return None
        name = names[event.which % len(names)]
        expected = event.n if name == "schedulable_token_capacity" else None
        answer, refusal = attempt(lambda: self.unit.query(name, event.n))
        if refusal is not None or answer != expected:
            return "mismatch", f"{name}({event.n}) answered {answer!r} ({refusal}), expected {expected!r}"
        self.coverage[f"query:{name}"] += 1
        return None
