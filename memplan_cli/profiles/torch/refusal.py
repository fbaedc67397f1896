"""What the torch profile refuses, with the one line that says why."""
from __future__ import annotations

from memplan_cli.ops._torch import INPLACE_WRITE
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.profiles.torch.eager_op import EagerOp
from memplan_cli.profiles.torch.facts import ESTIMATED, ESTIMATED_WHY, facts, fused_activations


def refusal(ops_: list[EagerOp], operands=None, source_format: str = "onnx", written_solves: bool = True
            ) -> str | None:
    """Why the torch profile refuses these ops (one line), or None; marks the ops it names as
    estimated. `written_solves`: a forward-substitution loop may stand in for eager's solve (a dynamo
    export); a TorchScript trace's loop is eager's own and is not named."""
    for op in ops_:
        if op.type == "SDPA?":
            return (f"torch profile: op {op.label} is scaled_dot_product_attention in a model with dropout, "
                    f"exported by torch.onnx's dynamo exporter without the aten calls it records: the file does "
                    f"not say whether sdpa's own dropout was on (the exporter drops it), and eager's CPU kernel "
                    f"differs (fused without dropout, the math path with it)")
        f = facts(op) if op.type != LOSS_TYPE else {}
        if f is None and source_format not in ("tflite", "circle"):
            op.attrs[ESTIMATED] = True  # the general rule covers it; the report names it
            continue
        if f is None:
            if source_format in ("tflite", "circle"):
                # a TF Lite file is no PyTorch export: its ops are read only where each is one eager op
                return (f"torch profile: op {op.label} ({op.type}) of a {source_format} file has no PyTorch "
                        f"counterpart: the torch profile is for exports of PyTorch modules (ONNX); a "
                        f"{source_format} model is read only where every op is one eager op")
            return (f"torch profile: op {op.label} ({op.type}) has no torch facts (what eager autograd saves "
                    f"for it is not modelled)")
        # a family's own refusal in a situation its facts do not cover (e.g. a CPU kernel not measured)
        why = f.get("refuse") and operands is not None and f["refuse"](op, operands)
        if why:
            return f"torch profile: op {op.label} ({op.type}): {why}"
        if f.get("estimated_written") and written_solves:
            for q in _solved_region(ops_, op):  # the file's loop is replayed; the report names it
                ops_[q].attrs[ESTIMATED] = True
                ops_[q].attrs[ESTIMATED_WHY] = f["estimated_written"]
                ops_[q].attrs.setdefault(SOLVED, op.label)  # which solve (replay.solved_groups)
        if f.get("estimated") and operands is not None and f["estimated"](op, operands):
            op.attrs[ESTIMATED] = True  # its facts cover it only approximately; the report names it
        act = (op.attrs.get("activation") or "NONE").upper()
        if act != "NONE" and act not in fused_activations():
            return f"torch profile: op {op.label} has a fused activation {act} eager has no op for here"
    return None


# attrs key: the label of the Trilu whose forward-substitution loop the op belongs to
SOLVED = "torch_solved"


def solved_groups(ops_: list[EagerOp]) -> list[list[int]]:
    """The positions of each forward-substitution loop (`_solved_region`), where nothing the loop
    reads is made after its first op (so it can run as one op at that place)."""
    groups: dict[str, list[int]] = {}
    for q, op in enumerate(ops_):
        if op.attrs.get(SOLVED):
            groups.setdefault(op.attrs[SOLVED], []).append(q)
    maker = {v: q for q, r in enumerate(ops_) for v in r.outputs}
    out = []
    for pos in groups.values():
        inside = set(pos)
        if all(maker.get(v, -1) < pos[0] or maker[v] in inside for q in pos for v in ops_[q].inputs):
            out.append(pos)
    return out


def _solved_region(ops_: list[EagerOp], op: EagerOp, hops: int = 3) -> list[int]:
    """Where `op`'s result, or that of a chain of up to `hops` one-input ops from it (a negation, a
    view), is the data of in-place writes (rewrites.inplace_writes), writes into their results
    following: the positions of `op` and of every op on a path from it to one of those writes (the
    loop that writes the rows: its slices, products and sums), and of the ops after it that only
    they read (dead ends). Empty where nothing is so written."""
    readers: dict[int, list[int]] = {}
    for q, r in enumerate(ops_):
        for v in set(r.inputs):
            readers.setdefault(v, []).append(q)
    written = lambda r: r.attrs.get(INPLACE_WRITE["attr"]) and r.inputs  # noqa: E731
    chain, values = set(op.outputs), set(op.outputs)
    for _ in range(hops):
        values = {v for q in {q for x in values for q in readers.get(x, ())}
                  if len([x for x in ops_[q].inputs if x >= 0]) == 1 for v in ops_[q].outputs}
        chain |= values
    writes: set[int] = set()
    frontier = chain
    while frontier:  # each write's result is its data's storage: the next row is written into it
        new = {q for v in frontier for q in readers.get(v, ()) if written(ops_[q]) and ops_[q].inputs[0] == v}
        new -= writes
        writes |= new
        frontier = {v for q in new for v in ops_[q].outputs}
    if not writes:
        return []
    pos = {id(r): q for q, r in enumerate(ops_)}
    start = pos[id(op)]
    after, todo = {start}, [start]  # ops reading op's result, directly or not
    while todo:
        for v in ops_[todo.pop()].outputs:
            for q in readers.get(v, ()):
                if q not in after:
                    after.add(q)
                    todo.append(q)
    maker = {v: q for q, r in enumerate(ops_) for v in r.outputs}
    before, todo = set(writes), list(writes)  # ops the writes read, directly or not
    while todo:
        for v in ops_[todo.pop()].inputs:
            q = maker.get(v)
            if q is not None and q in after and q not in before:
                before.add(q)
                todo.append(q)
    region = before | {start}
    # dead ends off the loop (a select only a view reads): one-input ops after it whose results lead
    # nowhere but into the loop, and that read nothing made after it but the loop's values
    dead: set[int] = set()
    for q in sorted(after - region, reverse=True):
        if len([v for v in ops_[q].inputs if v >= 0]) == 1 and \
                all(r in region or r in dead for v in ops_[q].outputs for r in readers.get(v, ())):
            dead.add(q)
    while True:
        drop = {q for q in dead if any(maker.get(v) in after and maker[v] not in region and maker[v] not in dead
                                       for v in ops_[q].inputs)
                or any(r not in region and r not in dead for v in ops_[q].outputs for r in readers.get(v, ()))}
        if not drop:
            break
        dead -= drop
    region |= dead
    return sorted(region)
