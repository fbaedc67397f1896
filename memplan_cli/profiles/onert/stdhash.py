"""libstdc++'s std::unordered_map iteration order, emulated, and the orders onert derives from it.

Two orders in onert's training memory plan come out of hash containers, not out of the model:
- TensorPlanner claims the non-constant operands that have no forward def (the permuted inputs x'
  and the permuted label y_true') first, in the iteration order of an
  `unordered_map<TrainingOperandIndex, uint32_t>`; under FirstFit that order changes capacities.
- `Graph::topolSortOperations` is a DFS that starts from each op in the operation map's order and
  walks each output's uses (`std::unordered_set<OperationIndex>`) in set order. A graph with
  branches has several topological orders; onert picks one per graph, and it picks from two
  different graphs: the train backend's partial graph (TensorPlanner's forward walk, which decides
  when activations are claimed and released) and the whole lowered graph (the order kernels are
  generated, so the order of the kernel-private ALLOC lines). They can differ.
Both are pure functions of how onert built its containers, which `OnertReplay` replays. Checked
against every container onert 0.1.0 logs with ONERT_LOG_ENABLE=1 (each graph dump lists its
operand map in iteration order and its ops in topological order; the planners log each claim) on
mnist, MobileNetV2, the test zoo and a few hundred random branching graphs of up to ~90 ops
(tests/onert/test_against_runtime.py compares claim sequences operand for operand).

libstdc++ (unique keys, max_load_factor 1.0):
- All nodes sit in one singly linked list; a bucket stores the node *before* its first node.
  Inserting into an empty bucket puts the node at the front of the whole list; into a non-empty
  bucket, at the front of that bucket's run. Erasing unlinks the node.
- Growth: the first insert allocates 13 buckets; inserting element n+1 > bucket count rehashes
  to the next entry of GROWTH (libstdc++'s prime list walked from 13 at factor >= 2, measured
  with g++ 12's libstdc++). A rehash walks the old list in order and re-links each node the same
  way as an insert.
- A copy of a map (copy constructor) keeps its order; onert's own container copies
  (`Operands(const Operands&)`, `setTrainingUseDefs`) instead re-insert element by element into
  a fresh map, which reorders.
- std::hash of an integral index is the value; onert's `TrainingOperandIndex` hashes to
  `(operand << 16) | is_forward` (core/include/ir/train/Index.h).
"""
from __future__ import annotations

GROWTH = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933,
          351061, 712697, 1447153, 2938679, 5967347)  # enough: onert asserts operand indices < 2^16
_HEAD = object()  # libstdc++'s _M_before_begin


class UnorderedMap:
    """Keys of a libstdc++ std::unordered_map (unique keys) in iteration order."""

    def __init__(self, hash_fn=lambda k: k):
        self.h = hash_fn
        self.nbkt = 1
        self._next_resize = 0
        self._nxt: dict = {_HEAD: None}
        self._bkt: dict = {}  # bucket -> node before the bucket's first node
        # a map filled by `reinserted` keeps only its keys in order until it is changed: most are
        # only iterated, and the linked list costs a dict entry per key
        self._order: list | None = None

    def _linked(self) -> None:
        """Build the linked list and buckets from `_order` (before a change)."""
        order, self._order = self._order, None
        nxt = self._nxt = dict(zip(order, order[1:]))
        nxt[order[-1]] = None
        nxt[_HEAD] = order[0]
        h, nb = self.h, self.nbkt
        bkt = self._bkt = {}
        prev = _HEAD
        for k in order:  # runs are contiguous: a bucket's first node follows its `before`
            b = h(k) % nb
            if b not in bkt:
                bkt[b] = prev
            prev = k

    def __len__(self) -> int:
        if self._order is not None:
            return len(self._order)
        return len(self._nxt) - 1

    def __contains__(self, k) -> bool:
        if self._order is not None:
            self._linked()
        return k in self._nxt and k is not _HEAD

    def __iter__(self):
        if self._order is not None:
            yield from self._order
            return
        k = self._nxt[_HEAD]
        while k is not None:
            yield k
            k = self._nxt[k]

    def keys(self) -> list:
        return list(self)

    def _grow_to(self, n: int):
        """_Prime_rehash_policy::_M_need_rehash for n elements: the new bucket count or None."""
        if n <= self._next_resize:
            return None
        want = max(n, 0 if self._next_resize else 11)
        if want < self.nbkt:
            self._next_resize = self.nbkt
            return None
        target = max(want + 1, self.nbkt * 2)
        for g in GROWTH:
            if g >= target:
                self._next_resize = g
                return g
        raise OverflowError("unordered_map emulation: too many elements")

    def _link(self, k, b):
        _link(self._nxt, self._bkt, self.h, self.nbkt, k, b)

    def insert(self, k) -> None:
        if self._order is not None:
            self._linked()
        nxt = self._nxt
        if k in nxt and k is not _HEAD:
            return
        if len(nxt) > self._next_resize:  # len(self) + 1 elements: _grow_to may rehash
            nb = self._grow_to(len(nxt))
            if nb is not None:
                self._rehash(nb)
                nxt = self._nxt
        _link(nxt, self._bkt, self.h, self.nbkt, k, self.h(k) % self.nbkt)

    def _rehash(self, nb: int) -> None:
        old = list(self)
        self.nbkt = nb
        self._nxt = nxt = {_HEAD: None}
        self._bkt = bkt = {}
        h = self.h
        for k in old:
            _link(nxt, bkt, h, nb, k, h(k) % nb)

    def erase(self, k) -> None:
        if k not in self:
            return
        b = self.h(k) % self.nbkt
        before = self._bkt[b]
        prev = before
        while self._nxt[prev] != k:
            prev = self._nxt[prev]
        nxt = self._nxt[k]
        if prev is before:  # k starts its bucket's run
            nb = self.h(nxt) % self.nbkt if nxt is not None else None
            if nxt is None or nb != b:  # the bucket is now empty
                if nxt is not None:
                    self._bkt[nb] = before
                del self._bkt[b]
        elif nxt is not None:
            nb = self.h(nxt) % self.nbkt
            if nb != b:
                self._bkt[nb] = prev
        self._nxt[prev] = nxt
        del self._nxt[k]


def _link(nxt: dict, bkt: dict, h, nbkt: int, k, b) -> None:
    """Link node k into bucket b: at the front of the bucket's run, or of the whole list when the
    bucket is empty (then the old first node's bucket points at k). A function of its containers,
    not a method: inserts and rehashes call it millions of times on large graphs."""
    before = bkt.get(b)
    if before is not None:
        nxt[k] = nxt[before]
        nxt[before] = k
    else:
        first = nxt[_HEAD]
        nxt[k] = first
        nxt[_HEAD] = k
        if first is not None:
            bkt[h(first) % nbkt] = k
        bkt[b] = _HEAD


def _growth_steps() -> list:
    """[(n, buckets)]: inserting the n-th key into a fresh map first rehashes to `buckets`."""
    m, steps, n = UnorderedMap(), [], 1
    while True:
        try:
            nb = m._grow_to(n)
        except OverflowError:
            return steps
        if nb is not None:
            steps.append((n, nb))
            m.nbkt = nb
        n = max(n + 1, m._next_resize + 1)


_STEPS = _growth_steps()


def reinserted(keys, hash_fn=lambda k: k) -> UnorderedMap:
    """A fresh map filled by inserting `keys` in order (how onert copies its containers).

    Computed per bucket count rather than node by node: between two rehashes every link follows
    one rule (a key into an empty bucket goes to the front of the list, otherwise to the front of
    its bucket's run), so the list is the buckets' runs, the bucket filled last first, each run's
    keys newest first; a rehash links the old list's keys in list order the same way. Tested
    against the node-by-node map (tests/onert/test_stdhash.py)."""
    keys = list(dict.fromkeys(keys))  # inserting a present key changes nothing
    m = UnorderedMap(hash_fn)
    n = len(keys)
    if not n:
        return m
    if n > _STEPS[-1][1]:
        raise OverflowError("unordered_map emulation: too many elements")
    if n == 1:
        m.nbkt = m._next_resize = _STEPS[0][1]
        m._order = keys
        return m
    if n > _NUMPY_FROM:
        m._order, m.nbkt = _order_np(keys, hash_fn, n)
        m._next_resize = m.nbkt
        return m
    order: list = []
    for j, (start, nb) in enumerate(_STEPS):
        if start > n:
            break
        end = _STEPS[j + 1][0] - 1 if j + 1 < len(_STEPS) else n
        runs: dict = {}
        for k in order + keys[start - 1:end]:
            b = hash_fn(k) % nb
            r = runs.get(b)
            if r is None:
                runs[b] = [k]
            else:
                r.append(k)
        order = [k for r in reversed(runs.values()) for k in reversed(r)]
        m.nbkt = m._next_resize = nb  # what _grow_to leaves after each rehash
    m._order = order
    return m


_NUMPY_FROM = 2000  # keys; below, numpy's per-call cost is more than the Python loop's


def _order_np(keys: list, hash_fn, n: int) -> tuple[list, int]:
    """`reinserted`'s order and bucket count with numpy: per bucket count, a stable sort of the
    sequence reversed by the bucket's first appearance, latest first."""
    import numpy as np

    if hash_fn is training_hash:
        hv = [(o << 16) | (1 if f else 0) for o, f in keys]
    else:
        hv = [hash_fn(k) for k in keys]
    h = np.array(hv, dtype=np.uint64)
    order = np.empty(0, dtype=np.int64)
    last = 0
    for j, (start, nb) in enumerate(_STEPS):
        if start > n:
            break
        last = nb
        end = min(_STEPS[j + 1][0] - 1, n) if j + 1 < len(_STEPS) else n
        seq = np.concatenate([order, np.arange(start - 1, end, dtype=np.int64)])
        b = (h[seq] % np.uint64(nb)).astype(np.int64)
        used, at = np.unique(b, return_index=True)  # each bucket's first position in seq
        first = np.zeros(nb, dtype=np.int64)
        first[used] = at
        order = seq[::-1][np.argsort(-first[b[::-1]], kind="stable")]
    return [keys[i] for i in order.tolist()], last


def training_hash(key) -> int:
    operand, is_forward = key
    return (operand << 16) | int(bool(is_forward))


def reverse_postorder(roots, succ, claim) -> list:
    """Post-order DFS from each root in turn, following `succ(node)` in order, reversed. A node
    (a root too) is entered only when `claim(node)` returns True, which also marks it. Iterative,
    the same order as onert's recursive DFS."""
    post = []
    for r in roots:
        if not claim(r):
            continue
        stack = [(r, iter(succ(r)))]
        while stack:
            k, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                post.append(k)
                stack.pop()
            elif claim(nxt):
                stack.append((nxt, iter(succ(nxt))))
    return post[::-1]


def dfs_topological(starts, uses: dict, outputs: dict) -> list:
    """Graph::topolSortOperations: a post-order DFS from each op of `starts` (the operation map's
    order) along each output's uses (in `uses[operand]` order), reversed; only ops of `starts`
    are entered."""
    unvisited = set(starts)

    def claim(k):
        if k in unvisited:
            unvisited.discard(k)
            return True
        return False

    return reverse_postorder(starts, lambda k: [u for o in outputs[k] for u in uses.get(o, ())], claim)


class OnertReplay:
    """onert 0.1.0's operand and operation containers for one model, from load to TensorPlanner.

    Indices are onert's, which for the model's own tensors and ops are the file's: tensors
    0..n-1, ops 0..m-1; LossInsertionPass adds y_true (n), the loss output (n+1) and the Loss op
    (m); ConstantInsertionPass one copy per extra op reading a shared constant (n+2...); and
    PermutationInsertionPass, in operand-map order, one Permute op (m+1...) with a new output
    operand for each graph input (its x'), y_true (y_true') and the model output (a builtin copy).

    Containers, in build order (each copy constructor re-inserts element by element):
    1. the loader emplaces tensors 0..n-1 and ops 0..m-1; each op adds itself to its inputs' use
       sets; UnusedOperandEliminationPass erases the tensors nothing reads or writes;
    2. TrainableGraph(graph) copies operands and ops; LossInsertionPass adds y_true, the loss
       output and the Loss op;
    3. LoweredTrainableGraph copies again; constant copies, then Permutes, are added; an input's
       uses move to its x' in use-set order;
    4. the train backend's partial graph takes the operands whose def backend is `train` (all but
       the graph inputs, y_true and the output's builtin copy) and the non-Permute ops, both in the
       whole graph's map order, and rebuilds the use sets in that op order;
    5. its TrainableGraph copies it; UseDefGenerator inserts {i, fwd}, {i, bwd} per operand;
       setTrainingUseDefs re-inserts them; planNonConstTensors fills `defs_map` with the forward
       non-constant ones and walks it.
    """

    def __init__(self, n_tensors: int, unused: set, inputs: list, y_pred: int, n_const_copies: int,
                 consts: set, op_inputs: list, op_outputs: list):
        m_ops = len(op_inputs)
        self.n_tensors = n_tensors
        y_true, loss_out, loss_op = n_tensors, n_tensors + 1, m_ops
        ins = {k: [i for i in dict.fromkeys(v) if i >= 0] for k, v in enumerate(op_inputs)}
        outs = {k: [o for o in dict.fromkeys(v) if o >= 0] for k, v in enumerate(op_outputs)}
        ins[loss_op], outs[loss_op] = [y_pred, y_true], [loss_out]

        # 1-2: operands and ops through the loader and the first copy, plus the loss
        operands = reinserted(range(n_tensors))
        for i in sorted(unused):
            operands.erase(i)
        operands = reinserted(operands)
        operands.insert(y_true)
        operands.insert(loss_out)
        ops = reinserted(reinserted(range(m_ops)))
        ops.insert(loss_op)
        uses = _use_sets(range(m_ops + 1), ins)
        # 3: the lowered graph
        operands = reinserted(operands)
        ops = reinserted(ops)
        nxt = n_tensors + 2
        copies = range(nxt, nxt + n_const_copies)
        for c in copies:
            operands.insert(c)
        nxt += n_const_copies
        # an input no op reads has no use backend: it gets no Permute (and no x')
        live = [i for i in inputs if i in uses and len(uses[i])]
        need = set(live) | {y_true, y_pred}
        permuted, next_op = {}, m_ops + 1
        for k in list(operands):
            if k not in need:
                continue
            new, perm_op = nxt, next_op
            permuted[k] = new
            operands.insert(new)
            nxt += 1
            ops.insert(perm_op)
            next_op += 1
            ins[perm_op], outs[perm_op] = [k], [new]
            uses.setdefault(k, UnorderedMap()).insert(perm_op)
            if k != y_pred:  # a graph input or y_true: its train-backend uses move to the copy
                moved = [u for u in uses[k] if u != perm_op]
                for u in moved:
                    ins[u] = [new if i == k else i for i in ins[u]]
                    uses.setdefault(new, UnorderedMap()).insert(u)
                for u in moved:
                    uses[k].erase(u)
        self.permuted = permuted
        whole = dfs_topological(list(ops), uses, outs)
        self.kernel_order = [k for k in whole if k <= loss_op]  # Linear::linearize, minus Permutes
        # 4-5: the train backend's partial graph and its TrainableGraph copy
        train_ops = [k for k in ops if k <= loss_op]
        puses = _use_sets(train_ops, ins)
        tops = reinserted(reinserted(train_ops))
        self.planner_order = dfs_topological(list(tops), puses, outs)
        builtin = set(inputs) | {y_true, permuted[y_pred]}
        partial = reinserted(k for k in operands if k not in builtin)
        tgraph = reinserted(partial)
        usedefs = reinserted(((i, f) for i in tgraph for f in (True, False)), training_hash)
        usedefs = reinserted(usedefs, training_hash)
        const = set(consts) | set(copies)
        defs_map = reinserted((k for k in usedefs if k[1] and k[0] not in const), training_hash)
        want = {permuted[i]: i for i in live}
        want[permuted[y_true]] = "y_true"
        # [(onert operand index, graph input index | "y_true")] in claim order
        self.zero_def = [(k[0], want[k[0]]) for k in defs_map if k[0] in want]


def _use_sets(op_order, ins) -> dict:
    """{operand: its use set}, each op added to its inputs' sets in `op_order`."""
    keys: dict = {}
    for k in op_order:
        for i in ins[k]:
            r = keys.get(i)
            if r is None:
                keys[i] = [k]
            else:
                r.append(k)
    return {i: reinserted(r) for i, r in keys.items()}


def unordered_order(ir, candidates):
    """Claim order of the operands with no forward def: x' of each input and y_true'.

    Falls back to index order (x' first) for an IR built without onert's bookkeeping.
    """
    replay = getattr(ir, "replay", None)
    if replay is None:
        return list(candidates)
    pos = {("y_true" if c == ir.y_true else c): n for n, c in enumerate(candidates)}
    out = [candidates[pos[what]] for _, what in replay.zero_def if what in pos]
    return out + [c for c in candidates if c not in out]
