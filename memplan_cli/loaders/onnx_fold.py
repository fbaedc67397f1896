"""Fold an ONNX model's shape computations into constants before the final shape inference.

Exporters compute shapes at run time: TorchScript writes `Expand(x, Where(Equal(s, -1),
ConstantOfShape(..), s))`, `Shape -> Gather -> Unsqueeze -> Concat -> Reshape` chains, `Range` over a
sequence length. onnx's shape inference (even with data propagation) leaves the results of many of
these unknown ('unk__0'), and memplan needs static shapes. Once the graph's inputs are fixed, these
values are constants; this pass computes them.

Rules:
- A value is known when it is a small integer/bool initializer, the output of a `Constant` node, or
  `Shape` / `Size` of a tensor whose shape inference gave a static shape.
- A default-domain node whose inputs are all known is evaluated with onnx's reference implementation
  (`onnx.reference`), and folded only if every output is an integer or bool tensor of at most
  MAX_ELEMENTS elements. Float tensors are never folded here: they are activations or weights
  (weights computed from constants are folded later, on the IR, by `opgraph.fold`).
- Float values computed only from `Constant` nodes and known integers (MobileViT's `ceil(h / patch) * patch`, cast back to an integer; Longformer's
  attention mask, `ones(shape) * (global_mask + 1)`, compared with 0 to find the global tokens) are
  known too, so the integer and bool results computed from them fold; the float nodes themselves
  are never folded into initializers (a float initializer would read as a weight), and are removed
  once nothing else reads them. So are integer or bool values of more than MAX_ELEMENTS elements
  (Longformer's 4-d mask, of which it reads one row per sample) and sequences of known tensors
  (SplitToSequence of `nonzero(as_tuple=True)`'s indices: SequenceAt of one folds), each up to
  MAX_KNOWN_ELEMENTS elements and MAX_KNOWN_TOTAL in a round. Except a float value read only as a Resize's (Upsample's) scales: a scale is no
  weight, and shape inference needs it (TorchScript's `interpolate(scale_factor=..)` without constant
  folding concatenates the scales from Constants).
- An `If` whose condition is known is its chosen branch: the branch's nodes take its place, writing
  the If's outputs (TorchScript's `scatter_reduce` symbolic branches on the data's rank, known once
  shapes are). A branch with initializers of its own or a nested subgraph is left as it is.
- Random ops are never evaluated. A node the reference cannot run is left as it is.
- Folded nodes are removed; each of their outputs still read by a remaining node (or a graph output)
  becomes an initializer. Shape inference then runs again, and the pass repeats while it folds
  something (each round can make new shapes static).
Weight bytes are never read: only integer/bool initializers of at most MAX_ELEMENTS elements.
"""
from __future__ import annotations

import numpy as np

from memplan_cli import ops
from memplan_cli.ops.views import IDENTITY_TYPE

MAX_ELEMENTS = 4096
MAX_FLOAT_ELEMENTS = 16
# values known only to compute others (never initializers): at most this many elements each, and
# this many in all per round (the work and memory a round may spend on them)
MAX_KNOWN_ELEMENTS = 1 << 20
MAX_KNOWN_TOTAL = 1 << 23
# a Loop of known trip count is unrolled while its body's nodes times its iterations stay within this
MAX_UNROLLED = 4096


def _small_int(arr) -> bool:
    return not isinstance(arr, list) and arr.dtype.kind in "iub" and arr.size <= MAX_ELEMENTS


def _small_float(arr) -> bool:
    return not isinstance(arr, list) and arr.dtype.kind == "f" and arr.size <= MAX_FLOAT_ELEMENTS


def _known_only(arr) -> bool:
    """A value known but never folded into an initializer: one computed from fills and shapes (a
    float, or more than MAX_ELEMENTS integers or bools, up to MAX_KNOWN_ELEMENTS), or a sequence of
    known tensors."""
    if isinstance(arr, list):
        return all(isinstance(a, np.ndarray) and _known_only(a) for a in arr)
    return arr.dtype.kind in "fiub" and arr.size <= MAX_KNOWN_ELEMENTS


def _size(arr) -> int:
    return sum(a.size for a in arr) if isinstance(arr, list) else arr.size


def _static_shapes(model) -> dict[str, tuple]:
    out = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = t.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(int(d.dim_value) for d in dims)
    for t in model.graph.initializer:  # an initializer's shape is its dims (a folded value's too)
        out[t.name] = tuple(int(d) for d in t.dims)
    return out


def _known_initializers(model) -> dict[str, np.ndarray]:
    from onnx import TensorProto, numpy_helper

    ints = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
            TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64, TensorProto.BOOL}
    known = {}
    for t in model.graph.initializer:
        n = int(np.prod(t.dims)) if t.dims else 1
        if t.data_type in ints and n <= MAX_ELEMENTS and t.data_location != TensorProto.EXTERNAL:
            try:
                known[t.name] = numpy_helper.to_array(t)
            except ValueError:  # bytes the stripper left out (more than its MAX_KEEP): unknown
                continue
    return known


def _shape_value(node, shapes, kind: str):
    """Shape / Size (`kind` "dims" / "count": the op family's `shape_of` fact) of a statically shaped
    tensor (Shape's start/end attributes, opset 15+)."""
    s = shapes.get(node.input[0])
    if s is None:
        return None
    if kind == "count":
        return np.array(int(np.prod(s)) if s else 1, dtype=np.int64)
    start, end = 0, len(s)
    for a in node.attribute:
        if a.name == "start":
            start = a.i
        elif a.name == "end":
            end = a.i
    return np.array(s[slice(start, end)], dtype=np.int64)


def _evaluate(node, values, opset: int):
    from onnx.reference import ReferenceEvaluator

    try:
        ref = ReferenceEvaluator(node, opsets={"": opset})
        feeds = {name: values[name] for name in node.input if name}
        outs = ref.run(None, feeds)
    except Exception:  # an op the reference lacks, or one it cannot run on these values
        return None
    return [[np.asarray(a) for a in o] if isinstance(o, list) else np.asarray(o) for o in outs]


def _branch_nodes(node, branches: tuple, then: bool) -> list | None:
    """The nodes of an If's chosen branch, writing the If's outputs (a branch output the branch does
    not make, a value from around it, goes through an Identity); None when it cannot be inlined."""
    from onnx import helper

    key = branches[0] if then else branches[1]
    g = next((a.g for a in node.attribute if a.name == key), None)
    if g is None or len(g.output) != len(node.output) or len(g.initializer) or len(g.sparse_initializer):
        return None
    if any(a.HasField("g") or len(a.graphs) for n in g.node for a in n.attribute):
        return None
    rename = {o.name: out for o, out in zip(g.output, node.output) if out}
    made = {o for n in g.node for o in n.output}
    nodes = []
    for n in g.node:
        c = type(n)()
        c.CopyFrom(n)
        for k, i in enumerate(c.input):
            if i in rename and i in made:
                c.input[k] = rename[i]
        for k, o in enumerate(c.output):
            if o in rename:
                c.output[k] = rename[o]
        nodes.append(c)
    for o in g.output:
        if o.name not in made and o.name in rename:
            nodes.append(helper.make_node(IDENTITY_TYPE, [o.name], [rename[o.name]]))
    return nodes


def _known_true(known: dict, name: str) -> bool:
    """Whether `name` is a known single value that is true (a Loop's condition)."""
    v = np.asarray(known.get(name, False))
    return v.size == 1 and bool(v.reshape(-1)[0])


def _loop_nodes(node, attr: str, known: dict) -> list | None:
    """The nodes of a Loop whose trip count is known, unrolled: the body once per iteration, each
    reading its iteration number (a Constant), the loop's condition and the values the iteration
    before carried, the last writing the Loop's outputs. Only a loop that runs every iteration (its
    condition known true, the body's an Identity of a value known true or the condition passed on),
    carries values but collects none (no scan outputs), holds no subgraph or initializer of its own
    and stays within MAX_UNROLLED nodes; None otherwise. TorchScript writes Python's loops over a
    known count so (torch.onnx's `tensor_split` at a list of indices: a Loop slicing one interval per
    index into a sequence); eager ran the body that many times."""
    from onnx import helper

    g = next((a.g for a in node.attribute if a.name == attr), None)
    trips = known.get(node.input[0]) if node.input and node.input[0] else None
    if g is None or trips is None or np.asarray(trips).size != 1 or len(g.initializer) or len(g.sparse_initializer):
        return None
    trips = int(np.asarray(trips).reshape(-1)[0])
    carried = list(node.input[2:])
    if trips < 1 or len(g.input) != 2 + len(carried) or len(g.output) != 1 + len(carried) \
            or len(node.output) != len(carried) or trips * len(g.node) > MAX_UNROLLED:
        return None
    if any(a.HasField("g") or len(a.graphs) for n in g.node for a in n.attribute):
        return None
    cond = node.input[1] if len(node.input) > 1 and node.input[1] else None
    if cond is not None and not _known_true(known, cond):
        return None
    made = {o: n for n in g.node for o in n.output}
    c_out = g.output[0].name
    if c_out != g.input[1].name:
        src = made.get(c_out)
        ok = src is not None and src.op_type == IDENTITY_TYPE and len(src.input) == 1 and \
            (src.input[0] == g.input[1].name or (src.input[0] not in made and _known_true(known, src.input[0])))
        if not ok:
            return None
    outs = [o.name for o in g.output[1:]]
    if len(set(outs)) != len(outs):
        return None
    nodes, prev = [], carried
    for i in range(trips):
        it = f"{node.output[0]}@iteration{i}"
        nodes.append(helper.make_node("Constant", [], [it], value=helper.make_tensor(it, 7, [], [i])))
        rename = {g.input[0].name: it, **{b.name: v for b, v in zip(g.input[2:], prev)}}
        if cond is not None:
            rename[g.input[1].name] = cond
        last = i == trips - 1
        for o in made:
            rename[o] = node.output[outs.index(o)] if last and o in outs else f"{o}@{i}"
        for n in g.node:
            c = type(n)()
            c.CopyFrom(n)
            c.name = f"{n.name}@{i}" if n.name else ""
            for k, v in enumerate(c.input):
                c.input[k] = rename.get(v, v)
            for k, v in enumerate(c.output):
                c.output[k] = rename.get(v, v)
            nodes.append(c)
        prev = [rename.get(o, o) for o in outs]
    for o, out in zip(prev, node.output):  # a value carried through unchanged
        if o != out:
            nodes.append(helper.make_node(IDENTITY_TYPE, [o], [out]))
    return nodes


def _read_sequences(nodes: list, known: dict) -> tuple[list, list]:
    """A SequenceAt at a known position of a sequence whose tensors are known by name (built by the
    ops of the "sequence_built" fact: SequenceEmpty, SequenceConstruct, SequenceInsert) becomes an
    Identity of that tensor; the builders nothing reads any more are dropped. Returns (nodes, the
    outputs of the SequenceAt read so)."""
    from onnx import helper

    held: dict[str, list] = {}
    for n in nodes:
        how = ops.source_facts("onnx", n.op_type).get("sequence_built") if n.domain in ("", "ai.onnx") else None
        if how == "empty" and len(n.output) == 1:
            held[n.output[0]] = []
        elif how == "inputs" and len(n.output) == 1:
            held[n.output[0]] = list(n.input)
        elif how == "insert" and len(n.output) == 1 and len(n.input) >= 2 and n.input[0] in held:
            seq = list(held[n.input[0]])
            pos = known.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
            if len(n.input) > 2 and n.input[2] and (pos is None or np.asarray(pos).size != 1):
                continue
            k = len(seq) if pos is None else int(np.asarray(pos).reshape(-1)[0])
            k = k + len(seq) if k < 0 else k
            if not 0 <= k <= len(seq):
                continue
            seq.insert(k, n.input[1])
            held[n.output[0]] = seq
    if not held:
        return nodes, []
    out, read = [], []
    for n in nodes:
        k = ops.source_facts("onnx", n.op_type).get("sequence_position_input")
        seq = held.get(n.input[0]) if k is not None and n.input and len(n.output) == 1 else None
        pos = known.get(n.input[k]) if seq is not None and k < len(n.input) else None
        if pos is not None and np.asarray(pos).size == 1:
            p = int(np.asarray(pos).reshape(-1)[0])
            p = p + len(seq) if p < 0 else p
            if 0 <= p < len(seq):
                out.append(helper.make_node(IDENTITY_TYPE, [seq[p]], [n.output[0]], name=n.name))
                read.append(n.output[0])
                continue
        out.append(n)
    if not read:
        return nodes, []
    dropped = True
    while dropped:  # builders of sequences nobody reads now
        used = {i for n in out for i in n.input}
        keep = [n for n in out if not (len(n.output) == 1 and n.output[0] in held and n.output[0] not in used)]
        dropped = len(keep) != len(out)
        out = keep
    return out, read


def fold_round(model, opset: int) -> int:
    """One pass in node order; returns how many nodes it folded (the model is changed in place)."""
    from onnx import numpy_helper

    shapes = _static_shapes(model)
    known = _known_initializers(model)
    folded, new_values, scalar_nodes = [], {}, []
    readers: dict[str, set] = {}
    for n in model.graph.node:
        for k, i in enumerate(n.input):
            readers.setdefault(i, set()).add((n.op_type, k))
    for o in model.graph.output:
        readers.setdefault(o.name, set()).add(("", -1))
    scales_only = {name for name, rs in readers.items()
                   if all(k >= 0 and ops.source_facts("onnx", t).get("scales_input") == k for t, k in rs)}
    inlined: dict[int, list] = {}  # id of an If whose condition is known -> its branch's nodes
    inlined_outputs: set[str] = set()
    held = []
    known_total = 0
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        body = ops.source_facts("onnx", node.op_type).get("body")
        if body:
            unrolled = _loop_nodes(node, body, known)
            if unrolled is not None:
                inlined[id(node)] = unrolled
                held.append(node)
                inlined_outputs.update(o for b in unrolled for o in b.output)
            continue
        branches = ops.source_facts("onnx", node.op_type).get("branches")
        if branches:
            cond = known.get(node.input[0]) if node.input else None
            branch = None if cond is None or np.asarray(cond).size != 1 else \
                _branch_nodes(node, branches, bool(np.asarray(cond).reshape(-1)[0]))
            if branch is not None:
                inlined[id(node)] = branch
                held.append(node)  # keeps its wrapper, and so its id, alive (as `folded` does)
                inlined_outputs.update(o for b in branch for o in b.output)
            continue
        if node.op_type == "Constant":
            out = _evaluate(node, known, opset)
            if out and (_small_int(out[0]) or _small_float(out[0]) or _known_only(out[0])):
                known[node.output[0]] = out[0]
            continue
        facts = ops.source_facts("onnx", node.op_type)
        if facts.get("shape_of"):
            v = _shape_value(node, shapes, facts["shape_of"])
            outs = None if v is None else [v]
        elif facts.get("random") or not all(not i or i in known for i in node.input) or not node.input:
            continue
        elif any(o in shapes and int(np.prod(shapes[o])) > MAX_KNOWN_ELEMENTS for o in node.output):
            continue  # too large to compute here (its shape is all a shape needs)
        else:
            outs = _evaluate(node, known, opset)
            pieces = facts.get("sequence_pieces")
            if pieces and outs and isinstance(outs[0], list):
                from onnx import helper

                split = known.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
                how = pieces({a.name: helper.get_attribute_value(a) for a in node.attribute}, split)
                if how is not None and not how["keep"]:  # the axis dropped, as ONNX Runtime drops it
                    outs = [[np.squeeze(a, how["axis"]) if a.shape[how["axis"]] == 1 else a for a in outs[0]]]
        if outs is None or len(outs) != len(node.output):
            continue
        foldable = all(_small_int(o) or _small_float(o) for o in outs) and not \
            (all(_small_float(o) for o in outs) and not all(not n or n in scales_only for n in node.output))
        if not foldable:
            size = sum(_size(o) for o in outs)
            if all(_known_only(o) for o in outs) and known_total + size <= MAX_KNOWN_TOTAL:
                # known, never folded (see the rules)
                known_total += size
                for name, v in zip(node.output, outs):
                    if name:
                        known[name] = v
                scalar_nodes.append(node)
            continue
        for name, v in zip(node.output, outs):
            if name:
                known[name] = v
                new_values[name] = v
        folded.append(node)
    gone = {id(n) for n in folded}
    keep = [m for n in model.graph.node if id(n) not in gone for m in inlined.get(id(n), [n])]
    keep, read_pieces = _read_sequences(keep, known)
    if not folded and not inlined and not read_pieces:
        return 0
    inlined_outputs.update(read_pieces)  # a sequence's element now: its shape is the tensor's
    outputs = {o.name for o in model.graph.output}
    dropped = True
    while dropped:  # float nodes only folded values read
        read = {i for n in keep for i in n.input} | outputs
        dead = {id(n) for n in scalar_nodes if id(n) not in gone and not any(o in read for o in n.output if o)}
        dropped = bool(dead)
        gone |= dead
        keep = [n for n in keep if id(n) not in dead]
    read = {i for n in keep for i in n.input} | outputs
    del model.graph.node[:]
    model.graph.node.extend(keep)
    have = {t.name for t in model.graph.initializer}
    for name, v in new_values.items():
        if name in read and name not in have:
            model.graph.initializer.append(numpy_helper.from_array(v, name))
    # value_info of folded tensors would shadow the initializers' shapes: drop them
    stale = set(new_values) | inlined_outputs  # an inlined If's merged shapes are its branches' now
    vi = [v for v in model.graph.value_info if v.name not in stale]
    del model.graph.value_info[:]
    model.graph.value_info.extend(vi)
    return len(folded) + len(inlined) + len(read_pieces)


def fold_shape_computations(model, opset: int, infer) -> tuple:
    """Alternate `infer(model) -> model` (shape inference) and fold rounds until nothing folds.
    Returns (model, nodes folded)."""
    total = 0
    model = infer(model)
    # each round folds at least one node, so this ends; a chain of blocks whose shapes each come from
    # the block before (timm's gMLP splits every block at a computed half) needs one round per block
    for _ in range(len(model.graph.node)):
        n = fold_round(model, opset)
        if not n:
            break
        total += n
        model = infer(model)
    return model, total
