"""Custom `torch.autograd.Function`s: ops that eager ran inside a Function's forward, read back as the
one autograd node the Function is.

autograd's own semantics (torch/autograd/function.py, torch/csrc/autograd/custom_function.cpp): a
Function's `forward` runs with grad mode off, so the ops it calls record nothing and save nothing;
each intermediate is freed as soon as the forward's Python code drops it; the node saves what
`ctx.save_for_backward` was given, and its `backward` is the Function's own Python code. The file
describes neither: the Function is taken to save its inputs (what a Function written to save memory,
BLOOM's `GeLUFunction`, saves) and its backward to recompute the forward's intermediates (its
temporaries are the forward's peak of them), and it is named as estimated.

- Recorded (dynamo): the exporter's recorded stack calls `Fn.apply(...)` into the Function's
  `forward` (`loaders/onnx_loader.py`); the connected ops so marked are one Function.
- Possible (TorchScript, no stack recorded): a written-out pointwise formula in a module of its own
  (`possible_functions`) may have run as a Function or op by op, and the file cannot tell. The ops run
  one by one stay the figure; they are named as estimated, and the figure as Functions is reported
  beside it (`figures.torch.coverage.as_functions`).
"""
from __future__ import annotations

from memplan_cli.ops._torch import POINTWISE_MATH
from memplan_cli.ops.matmul import MATMUL_TYPE as MATMUL  # a product of two computed tensors in eager
from memplan_cli.profiles.torch.eager_op import EagerOp
from memplan_cli.profiles.torch.facts import COMPOSED, ESTIMATED, facts
from memplan_cli.profiles.torch.strides import elements

FUNCTION = "Function"  # the eager op type of a custom autograd Function read back
# elementwise ops (TensorIterator's): what a written-out formula is made of; dropout draws and batch
# norm computes statistics, no formula
FORMULA_OPS = POINTWISE_MATH | {"SiLU"}
# a formula of fewer ops is what the exporters write for one aten op (silu: Sigmoid, Mul, read back
# as one op already), not a formula worth naming
MIN_FORMULA_OPS = 3


def module_path(name: str) -> str:
    """The module path of a TorchScript export's node name ("/m/h.0/mlp/act/Mul" -> "/m/h.0/mlp/act");
    "" for any other name."""
    if not name.startswith("/") or name.count("/") < 2:
        return ""
    return name.rsplit("/", 1)[0]


def scope_of(name: str) -> str:
    """The module scope of a TorchScript export's node name: its module path, "/" for the root module's
    own ops ("/Acos"); "" for any other name."""
    return module_path(name) or ("/" if name.startswith("/") and name.count("/") == 1 else "")


def module_scope(irop) -> str:
    """The module whose forward ran an op, as a string in which a submodule's scope extends its
    parent's past a separator: a TorchScript node name's path ("/m/enc/layer.0/attn/Add" ->
    "/m/enc/layer.0/attn"; "/" for the root module's own ops), else the dynamo exporter's recorded
    name scopes (each level's module path, then the node's own fx name, joined by the loader) less
    that name, after a "." ("." for the root's own ops); "" when the file records neither."""
    if irop.name.startswith("/"):
        return scope_of(irop.name) or "/"
    if irop.call:
        return "." + irop.scope.rsplit(".", 1)[0] if "." in (irop.scope or "") else "."
    return ""


def child_below(scope: str, outer: str) -> str | None:
    """The submodule of `outer` (module_scope's strings) whose forward ran an op of `scope`, None
    when `scope` is not strictly below `outer`."""
    if not outer or len(scope) <= len(outer) or not scope.startswith(outer):
        return None
    if outer[-1] not in "/." and scope[len(outer)] not in "/.":
        return None
    rest = scope[len(outer):].lstrip("/.")
    if outer[0] == "/":
        return rest.split("/")[0]
    # dynamo: each level's full path, so the child's path is the shortest one the rest repeats
    parts = rest.split(".")
    for k in range(1, len(parts) + 1):
        c = ".".join(parts[:k])
        if rest == c or rest.startswith(c + "." + c + "."):
            return c
    return rest


def _outside_reads(members: list[EagerOp], opd) -> list[int]:
    """The non-scalar operands the members read that none of them makes, in order of first read."""
    made = {v for op in members for v in op.outputs}
    out = []
    for op in members:
        for v in op.inputs:
            if v >= 0 and v not in made and v not in out and not (opd[v].is_const and elements(opd[v].shape) <= 1):
                out.append(v)
    return out


def _leaving(members: list[EagerOp], g, uses) -> list[int]:
    """The members' outputs read by an op outside them (or returned by the graph)."""
    inside = {m for op in members for m in op.members}
    return [v for op in members for v in op.outputs
            if v in g.outputs or any(u not in inside for u in uses.get(v, ()))]


def possible_functions(g, ops_: list[EagerOp], opd, uses, trained=frozenset()) -> list[list[int]]:
    """Positions (in `ops_`) of each written-out formula that eager may have run inside a custom
    Function, in a TorchScript export (no recorded stack): the eager ops of one module scope (the node
    names' path) that is a leaf (no module below it), all elementwise and at least MIN_FORMULA_OPS,
    consecutive in eager order, reading no parameter (no non-scalar constant) and exactly one tensor
    from outside, and handing one tensor on. An exporter's decomposition of one aten op that the
    profile reads back as that op (silu, linear, group_norm, sdpa) is one eager op of another type,
    so it is never part of one. Also, in any module scope, a chain of such ops between two matrix
    products (_between_products)."""
    if any(op.call for op in g.operations):
        return []  # a dynamo export records its stack: a Function there is known (recorded_functions)
    paths = [module_path(op.name) for op in g.operations]
    parents = {p.rsplit("/", 1)[0] for p in paths if p}
    by_scope: dict[str, list[int]] = {}
    for pos, op in enumerate(ops_):
        by_scope.setdefault(paths[op.index] if op.index < len(paths) else "", []).append(pos)
    groups = _between_products(ops_, [scope_of(op.name) for op in g.operations], opd, uses, trained)
    taken = {p for pos in groups for p in pos}
    for scope, pos in by_scope.items():
        if not scope or scope in parents or taken.intersection(pos):
            continue  # the root module's own ops, or a module with modules below it
        members = [ops_[p] for p in pos]
        if len(pos) < MIN_FORMULA_OPS or pos != list(range(pos[0], pos[-1] + 1)) or \
                any(op.type not in FORMULA_OPS or op.attrs.get(ESTIMATED) for op in members):
            continue
        reads = _outside_reads(members, opd)
        if len(reads) != 1 or opd[reads[0]].is_const or len(_leaving(members, g, uses)) != 1:
            continue
        groups.append(pos)
    return groups


def _between_products(ops_: list[EagerOp], paths: list[str], opd, uses, trained) -> list[list[int]]:
    """Chains of at least MIN_FORMULA_OPS elementwise ops of one module scope, consecutive in eager
    order, each reading the one before it and the only reader of its result, that start at a matrix
    product's result and hand on only to another product, reading nothing else but scalars and
    constants that do not train (a mask): a score's formula a Function may have computed (YOSO's
    `YosoCumulation`, whose forward the TorchScript file writes out op by op). An attention's softmax
    is no elementwise op, so a plain attention never makes one."""
    made_by = {v: pos for pos, op in enumerate(ops_) for v in op.outputs if v >= 0}
    eager_of = {m: pos for pos, op in enumerate(ops_) for m in op.members}
    path = [paths[op.index] if 0 <= op.index < len(paths) else "" for op in ops_]

    def formula(pos: int) -> bool:
        return ops_[pos].type in FORMULA_OPS and not ops_[pos].attrs.get(ESTIMATED) and bool(path[pos])

    def readers(pos: int) -> set[int]:
        """The eager ops reading the single result of ops_[pos] (empty when it has several)."""
        outs = [v for v in ops_[pos].outputs if v >= 0]
        return {eager_of.get(u, -1) for u in uses.get(outs[0], ())} if len(outs) == 1 else set()

    groups, pos = [], 0
    while pos < len(ops_):
        src = next((v for v in ops_[pos].inputs if v in made_by and ops_[made_by[v]].type == MATMUL), None)
        if not formula(pos) or src is None:
            pos += 1
            continue
        chain = [pos]
        while chain[-1] + 1 < len(ops_) and formula(chain[-1] + 1) and path[chain[-1] + 1] == path[pos] \
                and readers(chain[-1]) == {chain[-1] + 1}:
            chain.append(chain[-1] + 1)
        made = {v for q in chain for v in ops_[q].outputs}
        other = [v for q in chain for v in ops_[q].inputs if v >= 0 and v not in made and v != src]
        ends = readers(chain[-1])
        if len(chain) >= MIN_FORMULA_OPS and ends and all(0 <= r and ops_[r].type == MATMUL for r in ends) \
                and all(opd[v].is_const and v not in trained for v in other):
            groups.append(chain)
        pos = chain[-1] + 1
    return groups


def recorded_functions(g, ops_: list[EagerOp]) -> tuple[list[list[int]], dict[int, str], set[int]]:
    """The custom Functions the dynamo exporter's recorded stacks name (`autograd_functions`): positions
    (in `ops_`) of each set of connected ops one Function's forward wrote, consecutive in eager order
    and handing tensors on only after the last of them. Returns (those groups, the Function of each
    group by its number, positions of other ops so marked: they stay op by op, named as estimated)."""
    custom = (getattr(g, "metadata", None) or {}).get("autograd_functions") or {}
    if not custom:
        return [], {}, set()
    irops = g.operations
    marked = {pos: custom[irops[m].name] for pos, op in enumerate(ops_) for m in op.members
              if 0 <= m < len(irops) and irops[m].name in custom}
    made_by = {v: pos for pos in marked for v in ops_[pos].outputs}
    # connected components of the marked ops (same Function, data edges)
    root = {pos: pos for pos in marked}

    def find(p):
        while root[p] != p:
            root[p] = root[root[p]]
            p = root[p]
        return p

    for pos in marked:
        for v in ops_[pos].inputs:
            q = made_by.get(v)
            if q is not None and marked[q] == marked[pos]:
                root[find(pos)] = find(q)
    comps: dict[int, list[int]] = {}
    for pos in sorted(marked):
        comps.setdefault(find(pos), []).append(pos)
    groups, names, loose = [], {}, set()
    for pos in comps.values():
        if pos == list(range(pos[0], pos[-1] + 1)):
            names[len(groups)] = f"{marked[pos[0]]}.apply"
            groups.append(pos)
        else:
            loose.update(pos)
    return groups, names, loose


def _forward_peak(members: list[EagerOp], opd, leaving: list[int]) -> int:
    """Bytes the Function's forward holds at once beyond its inputs (grad mode off: each intermediate
    freed after its last reader among the members): its results and intermediates, made in order."""
    last = {}
    for k, op in enumerate(members):
        for v in op.inputs:
            last[v] = k
    live: dict[int, int] = {}
    peak = 0
    for k, op in enumerate(members):
        view = bool((facts(op) or {}).get("view"))
        for v in op.outputs:
            if v >= 0:
                live[v] = 0 if view else opd[v].nbytes
        peak = max(peak, sum(live.values()))
        for v in list(live):
            if v not in leaving and last.get(v, -1) <= k:
                del live[v]
    return peak


def function_facts(op) -> dict:
    """A Function's torch facts: it saves its inputs; its forward's intermediates are temporaries of
    the op; its backward recomputes them (as temporaries) and makes each input's gradient."""
    n = len(op.inputs)
    return {"saves": tuple((f"in{k}", "any") for k in range(n)),
            "fwd_tmp": (op.attrs["fwd_tmp"],) if op.attrs["fwd_tmp"] else (),
            "bwd_tmp": ((op.attrs["bwd_tmp"],),) if op.attrs["bwd_tmp"] else ()}


def as_functions(ops_: list[EagerOp], groups: list[list[int]], g, opd, uses, names=None) -> list[EagerOp]:
    """`ops_` with each group read back as one Function op (estimated) at its place: the tensors read
    from outside are its inputs, those handed on its outputs. `names`: the Function of each group."""
    first = {pos[0]: k for k, pos in enumerate(groups)}
    inside = {p for pos in groups for p in pos}
    out = []
    for p, op in enumerate(ops_):
        if p in first:
            k = first[p]
            members = [ops_[q] for q in groups[k]]
            leaving = _leaving(members, g, uses)
            peak = _forward_peak(members, opd, leaving)
            fwd_tmp = max(peak - sum(opd[v].nbytes for v in leaving), 0)
            name = (names or {}).get(k) or FUNCTION
            attrs = {ESTIMATED: True, "function": name, "fwd_tmp": fwd_tmp, "bwd_tmp": peak}
            out.append(EagerOp(op.index, FUNCTION, _outside_reads(members, opd), leaving, attrs,
                               f"{op.label} [{name}]", tuple(m for q in members for m in q.members)))
        elif p not in inside:
            out.append(op)
    return out


COMPOSED[FUNCTION] = function_facts
