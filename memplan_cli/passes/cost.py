"""The cost model: FLOPs of one training step, per op and per step of the execution order.

Rules:
- An op's figures come from its registry entry (`OpDef.flops`, or for an ONNX op kept unconverted
  its family's `ONNX_FACTS` "flops"). An op without one has no FLOPs:
  the step's figure is then withheld (`StepFlops.available` is False, `reason` names the op
  types), never estimated.
- Counted over the steps that run, so a schedule that runs an op's forward twice (a
  rematerialization) counts it twice: a forward step adds the op's forward FLOPs; the op's first
  backward step (calcGradient or calcDerivative) adds its backward FLOPs once. The registry's
  backward figure covers both backward steps; an op that runs only one of them (the first layer
  needs no dX) is counted with both: at most one forward pass of that op too many.
- A weight product (the conv and matmul families, whose second input is a constant weight) costs
  as much for dW as for dX: its backward figure less its forward figure is the weight gradient's
  share, counted only when the weight gets a gradient (not under `--train biases`, a frozen weight
  or LoRA), so a step that computes no dW is not charged for it.
- applyGradient: per element of each updated weight, sgd 2 (w -= lr g), momentum 4, adam 12
  (m: 3, v: 4, the update: 5), as `execute/kernels/optim.py` computes them.
- A multiply-add counts as 2 FLOPs. Integers, exact for the given shapes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from memplan_cli import ops as registry

OPTIMIZER_FLOPS = {"sgd": 2, "momentum": 4, "adam": 12}


def op_flops(op, operands) -> tuple[int, int] | None:
    """(forward, backward) FLOPs of one op, or None when memplan has no figure for its type."""
    d = registry.get(op.type)
    # an ONNX op kept unconverted (a random draw) may state its FLOPs among its family's facts
    fn = d.flops if d is not None else registry.source_facts("onnx", op.type).get("flops")
    if fn is None:
        return None
    out = fn(op, operands)
    if out is None:
        return None
    f, b = out
    return int(f), int(b)


@dataclass
class OpFlops:
    op: int
    label: str
    forward: int = 0  # every forward run of the op in the schedule (recomputations included)
    backward: int = 0
    runs: int = 0  # how many forward steps of the op the schedule has


@dataclass
class StepFlops:
    """FLOPs of one training step under one schedule. `forward`/`backward`/`optimizer`/`total` are
    None when some op has no figure (`missing` names the op types)."""

    ops: dict[int, OpFlops] = field(default_factory=dict)
    optimizer_flops: int = 0
    missing: list[str] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return not self.missing

    @property
    def reason(self) -> str:
        return f"no FLOPs for op {', '.join(self.missing)}" if self.missing else ""

    def _sum(self, key):
        return sum(getattr(o, key) for o in self.ops.values()) if self.available else None

    @property
    def forward(self) -> int | None:
        return self._sum("forward")

    @property
    def backward(self) -> int | None:
        return self._sum("backward")

    @property
    def optimizer(self) -> int | None:
        return self.optimizer_flops if self.available else None

    @property
    def total(self) -> int | None:
        return self.forward + self.backward + self.optimizer_flops if self.available else None


WEIGHT_PRODUCT_FAMILIES = ("conv", "matmul")


def _untrained_weight_share(op, operands, fig, grads) -> int:
    """The FLOPs of a weight gradient the step does not compute (see the module rules)."""
    d = registry.get(op.type)
    if d is None or getattr(d, "family", None) not in WEIGHT_PRODUCT_FAMILIES or len(op.inputs) < 2:
        return 0
    w = op.inputs[1]
    if w < 0 or not operands[w].is_const or w in grads:
        return 0
    return max(0, fig[1] - fig[0])


def step_flops(tg) -> StepFlops:
    """FLOPs of the training step `tg` runs (see the module rules)."""
    g = tg.graph
    out = StepFlops()
    per_op: dict[int, tuple[int, int] | None] = {}
    missing: dict[str, None] = {}
    backed: set[int] = set()
    per_elem = OPTIMIZER_FLOPS.get(getattr(tg.config, "optimizer", "sgd"), 0)
    # elements of the trained weights, by their forward tensor (one pass, not one per applyGradient)
    grad_elems: dict[int, int] = {}
    for v in tg.grad:
        t = tg.fwd.get(v)
        if t is not None:
            grad_elems[t] = grad_elems.get(t, 0) + tg.tensors[tg.fwd[v]].num_elements
    for s in tg.steps:
        if s.op < 0:
            continue
        if s.kind == "applyGradient":
            out.optimizer_flops += per_elem * sum(grad_elems.get(t, 0) for t in set(s.writes))
            continue
        if s.op not in per_op:
            op = g.operations[s.op]
            per_op[s.op] = op_flops(op, g.operands)
            if per_op[s.op] is None:
                missing[op.type] = None
        fig = per_op[s.op]
        row = out.ops.setdefault(s.op, OpFlops(s.op, g.operations[s.op].label))
        if fig is None:
            continue
        if s.kind == "forward":
            row.forward += fig[0]
            row.runs += 1
        elif s.op not in backed:
            backed.add(s.op)
            row.backward += fig[1] - _untrained_weight_share(g.operations[s.op], g.operands, fig, tg.grad)
    out.missing = sorted(missing)
    return out
