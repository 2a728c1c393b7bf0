"""`RadixCache`: the prefix tree that owns cached KV slots, with the 0.5.19 insert, lock and release rules.

Keys are token ids truncated to whole pages; each node's value holds one KV slot per token of its key. A node
is protected while a lock is held on it or on a descendant, evictable otherwise; both sizes are counters, as
upstream, and `recount_sizes` recomputes them from the nodes so checkers can compare the two.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from impl.allocator import BaseTokenToKVPoolAllocator
from impl.faults import NO_FAULTS, FaultSet
from impl.prefix_cache import RowRelease
from impl.records import Req
from impl.req_pool import ContractViolation, ReqToTokenPool


@dataclass(frozen=True)
class TreeCensus:
    """What one walk over the tree's nodes finds: the slots it owns (`slots`), those on unlocked nodes
    (`unlocked_slots`), and the token counts of unlocked and locked nodes."""

    slots: torch.Tensor
    unlocked_slots: torch.Tensor
    evictable: int
    protected: int


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


class TreeNode:
    """One edge of the tree: token ids, their KV slots, children by first-page key, and a lock count."""

    __slots__ = ("children", "key", "last_access", "lock_ref", "node_id", "parent", "value")

    def __init__(self, node_id: int, key: list[int], value: torch.Tensor, parent: TreeNode | None):
        self.node_id = node_id
        self.key = key
        self.value = value
        self.parent = parent
        self.children: dict[tuple[int, ...], TreeNode] = {}
        self.lock_ref = 0
        self.last_access = 0

    def __deepcopy__(self, memo: dict[int, object]) -> TreeNode:
        """As `copy.deepcopy` would, without a call per token id: keys hold ints (a list copy is deep) and
        children are keyed by tuples of ints (immutable, shared)."""
        node = TreeNode.__new__(TreeNode)
        memo[id(self)] = node
        node.node_id, node.key, node.value = self.node_id, list(self.key), copy.deepcopy(self.value, memo)
        node.parent = copy.deepcopy(self.parent, memo)
        node.children = {first: copy.deepcopy(child, memo) for first, child in self.children.items()}
        node.lock_ref, node.last_access = self.lock_ref, self.last_access
        return node


class RadixCache(RowRelease):
    """Prefix tree over page-aligned token keys, with the release interface of `ChunkCache`."""

    def __init__(
        self,
        req_to_token_pool: ReqToTokenPool,
        allocator: BaseTokenToKVPoolAllocator,
        page_size: int,
        faults: FaultSet = NO_FAULTS,
    ):
        assert page_size >= 1, f"page_size must be positive, got {page_size}"
        assert allocator.page_size == page_size, "the tree's pages must be the allocator's pages"
        self.req_to_token_pool = req_to_token_pool
        self.allocator = allocator
        self.page_size = page_size
        self.faults = faults
        self.reset()

    def reset(self) -> None:
        """Drop the whole tree without freeing its slots: the caller clears the allocator alongside."""
        self._node_ids = itertools.count()
        self._access_clock = 0
        self.root = TreeNode(next(self._node_ids), [], self._empty(), None)
        self.root.lock_ref = 1  # never evictable and never counted: lock walks stop below it
        self.evictable_size_ = 0
        self.protected_size_ = 0

    def supports_mamba(self) -> bool:
        return False

    # -- the tree -------------------------------------------------------------------------------------------

    def match_prefix(
        self, token_ids: Sequence[int], max_prefix_len: int | None = None
    ) -> tuple[torch.Tensor, TreeNode]:
        """Slots of the longest cached page-aligned prefix of `token_ids[:max_prefix_len]`, and its last node.

        Admission passes `max_prefix_len = len(token_ids) - 1` so that at least one token is computed. A match
        that ends inside a node splits it, so the returned node always ends exactly at the match.
        """
        if max_prefix_len is not None:
            token_ids = token_ids[: max(max_prefix_len, 0)]
        node, values = self._descend(self._aligned_key(token_ids))
        return (torch.cat(values) if values else self._empty()), node

    def insert(self, key: Sequence[int], values: torch.Tensor) -> int:
        """Cache `values` (a slot per token) under `key` cut to whole pages; returns the length already cached.

        The tree keeps the slots past that length; the caller still owns `values[:prefix_len]` (duplicates).
        """
        assert len(key) == values.numel(), f"key has {len(key)} tokens but {values.numel()} slots"
        aligned = self._aligned_key(key)
        node, matched = self._descend(aligned)
        prefix_len = sum(v.numel() for v in matched)
        if prefix_len < len(aligned):
            leaf_value = values[prefix_len : len(aligned)].to(torch.int64).clone()
            leaf = TreeNode(next(self._node_ids), aligned[prefix_len:], leaf_value, node)
            leaf.last_access = self._access_clock
            node.children[self._child_key(leaf.key)] = leaf
            # #35270: the counter took the whole key, counting the already cached prefix a second time.
            self.evictable_size_ += len(aligned) if self.faults.on("radix_counter_double_add") else len(leaf.key)
        return prefix_len

    def inc_lock_ref(self, node: TreeNode) -> None:
        """Lock `node` and its ancestors (root excluded); a node's tokens turn protected at its first lock."""
        path = self._path_to_root(node)
        if self.faults.on("lock_walk_off_by_one"):
            path = path[1:]  # mini-sglang #52: the walk started at node.parent
        for n in path:
            if n.lock_ref == 0:
                self.evictable_size_ -= len(n.key)
                self.protected_size_ += len(n.key)
            n.lock_ref += 1

    def dec_lock_ref(self, node: TreeNode) -> None:
        """Release one lock on `node` and its ancestors; a node's tokens turn evictable at its last unlock."""
        path = self._path_to_root(node)
        # Upstream lets lock_ref go negative; refusing first keeps a bad call from changing anything.
        _require(all(n.lock_ref > 0 for n in path), f"dec_lock_ref on node {node.node_id} that holds no lock")
        for n in path:
            if n.lock_ref == 1:
                self.evictable_size_ += len(n.key)
                self.protected_size_ -= len(n.key)
            n.lock_ref -= 1

    def evict(self, num_tokens: int) -> int:
        """Free unlocked leaves, least recently used first (older node on ties), until `num_tokens` are freed.

        Returns the number of tokens freed; it is short of `num_tokens` only when nothing evictable is left.
        """
        heap = [(n.last_access, n.node_id, n) for n in self._nodes() if self._is_evictable_leaf(n)]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            self._delete_leaf(leaf)
            freed += len(leaf.key)
            if self._is_evictable_leaf(parent):
                heapq.heappush(heap, (parent.last_access, parent.node_id, parent))
        return freed

    # -- accounting -----------------------------------------------------------------------------------------

    def evictable_size(self) -> int:
        return self.evictable_size_

    def protected_size(self) -> int:
        return self.protected_size_

    def recount_sizes(self) -> tuple[int, int]:
        """The (evictable, protected) token counts recomputed from the nodes; the counters must equal them."""
        census = self.census()
        return census.evictable, census.protected

    def census(self) -> TreeCensus:
        """One walk over the nodes: every slot the tree owns, those on unlocked nodes, and the recounted
        (evictable, protected) token counts (what `owned_slots` and `recount_sizes` say, in one pass)."""
        values, unlocked, evictable, protected = [], [], 0, 0
        for node in self._nodes():
            values.append(node.value)
            if node.lock_ref == 0:
                unlocked.append(node.value)
                evictable += len(node.key)
            else:
                protected += len(node.key)
        slots = torch.cat(values) if values else self._empty()
        return TreeCensus(slots, torch.cat(unlocked) if unlocked else self._empty(), evictable, protected)

    def owned_slots(self, unlocked_only: bool = False) -> torch.Tensor:
        """Every KV slot the tree owns (only those on unlocked nodes with `unlocked_only`), one per cached token."""
        census = self.census()
        return census.unlocked_slots if unlocked_only else census.slots

    # -- the release interface ------------------------------------------------------------------------------

    def cache_finished_req(self, req: Req, is_insert: bool, kv_len_to_handle: int) -> None:
        """Hand `[P, n)` to the tree (duplicates freed) or, without insert, to the allocator; then unlock.

        Either way the unaligned tail `[page_floor(n), n)` goes back to the allocator.
        """
        held = self._held_node(req)
        protected_len, seq_len = req.kv.cache_protected_len, kv_len_to_handle
        aligned_len = seq_len - seq_len % self.page_size
        assert protected_len <= aligned_len, f"protected length {protected_len} past aligned {aligned_len}"
        slots = self.row_slots(req, 0, seq_len)
        owned_end = aligned_len
        if is_insert:
            owned_end = self.insert(self._token_ids(req, aligned_len), slots[:aligned_len])
            # The request's protected prefix is locked in the tree, so the insert must have matched it.
            assert owned_end >= protected_len, f"insert matched {owned_end} < protected {protected_len}"
        self.allocator.free(torch.cat((slots[protected_len:owned_end], slots[aligned_len:seq_len])))
        if held is not None:
            self.dec_lock_ref(held)

    def cache_unfinished_req(self, req: Req) -> None:
        """Between chunks: cache `[0, extend_range_end)` page-aligned, point the row at the tree, move the lock.

        The unaligned tail stays the request's own and rides along in `prefix_indices` for the next chunk.
        """
        kv, held = req.kv, self._held_node(req)
        seq_len = req.extend_range_end
        assert seq_len == kv.kv_committed_len, f"extend end {seq_len} != committed {kv.kv_committed_len}"
        if req.skip_radix_cache_insert:  # barred from the tree: the next chunk reads its own slots
            req.prefix_indices = self.row_slots(req, 0, seq_len).clone()
            return
        aligned_len = seq_len - seq_len % self.page_size
        slots = self.row_slots(req, 0, seq_len)
        token_ids = self._token_ids(req, aligned_len)
        protected_len = kv.cache_protected_len
        prefix_len = self.insert(token_ids, slots[:aligned_len])
        self.allocator.free(slots[protected_len:prefix_len])
        new_indices, new_node = self.match_prefix(token_ids)
        assert new_indices.numel() == aligned_len, "the key just inserted must match in full"
        assert kv.req_pool_idx is not None
        # The row now names the tree's slots for [P, aligned): the request's copies there were just freed.
        self.req_to_token_pool.write(kv.req_pool_idx, protected_len, new_indices[protected_len:])
        kv.cache_protected_len = aligned_len
        if held is not None:
            self.dec_lock_ref(held)
        self.inc_lock_ref(new_node)
        req.prefix_indices = torch.cat((new_indices, slots[aligned_len:seq_len]))
        req.last_node = new_node

    # -- internals ------------------------------------------------------------------------------------------

    def _descend(self, key: list[int]) -> tuple[TreeNode, list[torch.Tensor]]:
        """Walk page-aligned `key` from the root, splitting a partly matched node; returns node and values."""
        self._access_clock += 1
        node, values = self.root, []
        while key and self._child_key(key) in node.children:
            child = node.children[self._child_key(key)]
            child.last_access = self._access_clock
            matched = self._match_len(child.key, key)
            if matched < len(child.key):
                child = self._split(child, matched)
            values.append(child.value)
            node, key = child, key[matched:]
        return node, values

    def _split(self, child: TreeNode, split_len: int) -> TreeNode:
        """Cut `child` after `split_len` tokens; the new upper node keeps the lock count of the whole."""
        parent = child.parent
        assert parent is not None and 0 < split_len < len(child.key)
        upper = TreeNode(next(self._node_ids), child.key[:split_len], child.value[:split_len].clone(), parent)
        # Every lock that covered the whole node covers both parts, so neither size counter moves.
        upper.lock_ref = child.lock_ref
        upper.last_access = child.last_access
        parent.children[self._child_key(upper.key)] = upper
        child.key, child.value, child.parent = child.key[split_len:], child.value[split_len:].clone(), upper
        upper.children[self._child_key(child.key)] = child
        return upper

    def _delete_leaf(self, leaf: TreeNode) -> None:
        parent = leaf.parent
        assert parent is not None and not leaf.children and leaf.lock_ref == 0
        self.allocator.free(leaf.value)
        del parent.children[self._child_key(leaf.key)]
        self.evictable_size_ -= len(leaf.key)
        leaf.parent = None  # a stale handle on an evicted node is then refused by the lock walk

    def _path_to_root(self, node: TreeNode) -> list[TreeNode]:
        # Walked in full before any lock moves, so a stale node is refused with the tree unchanged (#29291).
        path, walk = [], node
        while walk.parent is not None:
            path.append(walk)
            walk = walk.parent
        _require(walk is self.root, f"node {node.node_id} is not in this tree (a stale lock handle)")
        return path

    def _held_node(self, req: Req) -> TreeNode | None:
        """The request's locked node, checked to unlock cleanly before the caller changes anything."""
        node = req.last_node
        if node is None:
            return None
        assert isinstance(node, TreeNode), f"request {req.rid} holds a lock handle that is not a tree node"
        _require(all(n.lock_ref > 0 for n in self._path_to_root(node)), f"request {req.rid} holds no lock")
        return node

    def _token_ids(self, req: Req, length: int) -> list[int]:
        assert len(req.fill_ids) >= length, f"request {req.rid}: fill_ids shorter than {length}"
        return req.fill_ids[:length]

    def _nodes(self) -> Iterator[TreeNode]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _is_evictable_leaf(self, node: TreeNode) -> bool:
        return node is not self.root and not node.children and node.lock_ref == 0

    def _aligned_key(self, token_ids: Sequence[int]) -> list[int]:
        return list(token_ids[: len(token_ids) - len(token_ids) % self.page_size])

    def _match_len(self, node_key: list[int], key: list[int]) -> int:
        """Common prefix length of two keys, cut to whole pages (a page matches only in full)."""
        common = 0
        for a, b in zip(node_key, key, strict=False):
            if a != b:
                break
            common += 1
        return common - common % self.page_size

    def _child_key(self, key: list[int]) -> tuple[int, ...]:
        return tuple(key[: self.page_size])

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int64, device=self.req_to_token_pool.device)
