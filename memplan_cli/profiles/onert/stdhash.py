"""libstdc++'s unordered_map iteration order, emulated, for onert's maps keyed by operand index.

onert claims the operands that have no forward def (x', y_true') in the iteration order of an
unordered_map; under FirstFit that order changes capacities. libstdc++ keeps all nodes in one
singly linked list: a node whose bucket is empty goes to the front of the list, otherwise to the
front of its bucket's run; a rehash walks the old list and rebuilds it the same way.
Bucket counts when growing one insert at a time (measured with g++'s libstdc++).
"""
from __future__ import annotations

GROWTH = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933,
          351061, 712697, 1447153, 2938679)


class UnorderedMap:
    """Insertion-only model of std::unordered_map<K, V> with an identity-like integer hash."""

    def __init__(self, hash_fn=lambda k: k):
        self.h = hash_fn
        self.nbkt = 1
        self.order: list = []  # iteration order
        self.keys: set = set()
        self.first_of: dict = {}  # bucket -> position is recomputed lazily (lists are small)

    def _bucket(self, k, n=None):
        return self.h(k) % (n or self.nbkt)

    def _insert_node(self, order, k, nbkt, heads):
        b = self.h(k) % nbkt
        if b in heads:
            pos = order.index(heads[b])
            order.insert(pos, k)
        else:
            order.insert(0, k)
        heads[b] = k

    def insert(self, k):
        if k in self.keys:
            return
        n = len(self.keys) + 1
        if n > (self.nbkt if self.nbkt > 1 else 0):
            new = next(g for g in GROWTH if g >= n and g > self.nbkt) if self.nbkt > 1 else GROWTH[0]
            if self.nbkt == 1 or n > self.nbkt:
                self._rehash(new)
        heads = {}
        for x in self.order:  # first node of each bucket run
            heads.setdefault(self._bucket(x), x)
        self._insert_node(self.order, k, self.nbkt, heads)
        self.keys.add(k)

    def _rehash(self, nbkt):
        new, heads = [], {}
        for x in self.order:
            self._insert_node(new, x, nbkt, heads)
        self.order, self.nbkt = new, nbkt

    def __iter__(self):
        return iter(list(self.order))


def unordered_order(ir, candidates):
    """Claim order of the operands with no forward def (x' of each input, then y_true').

    onert walks an unordered_map whose history we do not replay; index order (x' first) is what
    onert 0.1.0 does on mnist and MobileNetV2 (measured); on some small graphs y_true' comes
    first, which changes FirstFit capacities only (see tests/onert).
    """
    return list(candidates)
