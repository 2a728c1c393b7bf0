"""The campaign's example database: one shared folder, keyed per pool, swarm and faults."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase


def campaign_database(db: Path, pool: str, swarm: str, faults: list[str], plans: bool = False) -> KeyedDatabase:
    """The example database of one campaign configuration: the shared folder `db`, keyed by pool, swarm and
    faults (HypoFuzz targets save under the same keys, so a campaign replays what they found), and by fault plans
    where the machine has its `arm_fault` rule (its examples draw other rules)."""
    return KeyedDatabase(DirectoryBasedExampleDatabase(str(db)), f"{pool}|{swarm}|{faults}" + ("|plans" * plans))


class KeyedDatabase(ExampleDatabase):
    """An example database whose keys carry a prefix: every lockstep machine class has the same digest, so
    without it a failure saved by one pool or swarm would be replayed by all of them."""

    def __init__(self, inner: ExampleDatabase, prefix: str) -> None:
        super().__init__()
        self.inner, self.prefix = inner, prefix.encode() + b"|"

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(self.prefix + key, value)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self.inner.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(self.prefix + src, self.prefix + dest, value)
