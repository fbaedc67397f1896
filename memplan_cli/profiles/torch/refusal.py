"""What the torch profile refuses, with the one line that says why."""
from __future__ import annotations

from memplan_cli.ops._torch import INPLACE_WRITE
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.profiles.torch.eager_op import EagerOp
from memplan_cli.profiles.torch.facts import ESTIMATED, facts, fused_activations


def refusal(ops_: list[EagerOp], operands=None, source_format: str = "onnx") -> str | None:
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
        if f.get("refuse_written") and _written_in_place(ops_, op):
            return f"torch profile: op {op.label} ({op.type}): {f['refuse_written']}"
        if f.get("estimated") and operands is not None and f["estimated"](op, operands):
            op.attrs[ESTIMATED] = True  # its facts cover it only approximately; the report names it
        act = (op.attrs.get("activation") or "NONE").upper()
        if act != "NONE" and act not in fused_activations():
            return f"torch profile: op {op.label} has a fused activation {act} eager has no op for here"
    return None


def _written_in_place(ops_: list[EagerOp], op: EagerOp, hops: int = 3) -> bool:
    """Whether `op`'s result, or that of a chain of up to `hops` one-input ops from it (a negation, a
    view), is the data of an in-place write (rewrites.inplace_writes)."""
    values = set(op.outputs)
    for _ in range(hops + 1):
        readers = [r for r in ops_ if values & set(r.inputs)]
        if any(r.attrs.get(INPLACE_WRITE["attr"]) and r.inputs and r.inputs[0] in values for r in readers):
            return True
        values = {v for r in readers if len([x for x in r.inputs if x >= 0]) == 1 for v in r.outputs}
        if not values:
            return False
    return False
