"""Per-op backward rules as data: what an op's forward and backward steps touch.

A rule is a function `rule(op, ctx) -> OpRule`, registered by op type in a `dict` (see
`default_rules()`); a profile passes its own dict entries to override any of them. Rules speak in
references, which the execution-order pass resolves to tensors:

- `("fwd", operand)`: the forward tensor of an operand (activation, weight, constant, label);
- `("bp", operand)`: for one of the op's outputs, the back-prop arriving at it (all consumers'
  contributions accumulated); for one of its inputs, this op's contribution to that input's back-prop;
- `("grad", operand)`: the gradient of a weight;
- `("extra", k)`: the op's k-th extra tensor request.

Steps a rule leaves as None do not run. Which inputs need a back-prop and whether the op's weights
are updated are decided before rules run (`RuleContext.needs_bp`, `RuleContext.trains`), so a rule
only asks for what is needed: the forward tensors it reads in a backward step are exactly the ones
kept alive for backward.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# Extra-tensor lifetimes (ONE's ExtraTensorLifeTime, draft 1): live during the op's forward step,
# during its backward steps, or from its forward step to its last backward step.
FORWARD, BACKWARD, FORWARD_TO_BACKWARD = "FORWARD", "BACKWARD", "FORWARD_TO_BACKWARD"
LIFETIMES = (FORWARD, BACKWARD, FORWARD_TO_BACKWARD)

Ref = tuple  # ("fwd"|"bp"|"grad"|"extra", int)


@dataclass
class ExtraRequest:
    """An auxiliary tensor a kernel needs (ONE's ExtraTensorRequest): shape, dtype, lifetime.

    `lifetime` documents the intent (FORWARD, BACKWARD, FORWARD_TO_BACKWARD); the interval itself
    follows from the steps that reference `("extra", k)`.
    """

    what: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    lifetime: str = BACKWARD

    def __post_init__(self):
        if self.lifetime not in LIFETIMES:
            raise ValueError(f"unknown extra-tensor lifetime {self.lifetime!r}")


@dataclass(slots=True)
class StepIO:
    reads: list = field(default_factory=list)
    writes: list = field(default_factory=list)


@dataclass(slots=True)
class OpRule:
    """What one op touches in each of its steps (references, see the module docstring).

    `weights`: the op's parameter operands (get a gradient and optimizer state when the op trains).
    `view`: (output, input) when the output is the input's memory seen with another shape.
    `inplace`: (src, dst) pairs the kernel may compute in place, dst over src, when src is dead after
    the step (the aliasing pass checks that).
    """

    forward: StepIO
    calc_gradient: StepIO | None = None
    calc_derivative: StepIO | None = None
    extras: list[ExtraRequest] = field(default_factory=list)
    weights: list[int] = field(default_factory=list)
    view: tuple[int, int] | None = None
    inplace: list[tuple[Ref, Ref]] = field(default_factory=list)
    # every in-place dst of one step holds the same values (an Add's dA = dB = dY): they may share
    # src's memory together; otherwise one dst per step takes it over (passes/aliasing.py)
    inplace_equal: bool = False
    note: str = ""

    def backward_steps(self):
        return [s for s in (self.calc_gradient, self.calc_derivative) if s is not None]

    def kept_forward(self) -> list[int]:
        """Forward operands some backward step reads (kept alive for backward)."""
        out = []
        for s in self.backward_steps():
            out += [r[1] for r in s.reads if r[0] == "fwd"]
        return list(dict.fromkeys(out))


MASKABLE_FUSED = ("RELU", "RELU6", "RELU_N1_TO_1")
MASKABLE_OPS = ("Relu", "Relu6", "Clip")


def maskable(op) -> bool:
    """Whether the op's activation derivative is a function of one bit per element (lo < y < hi)."""
    return op.type in MASKABLE_OPS or (op.attrs.get("activation") or "NONE") in MASKABLE_FUSED


def data_inputs(op) -> list[int]:
    return [i for i in op.inputs if i >= 0]


def fused_activation(op, ctx, rule: OpRule, out: int) -> None:
    """Fold a fused activation's backward into the op's first backward step.

    The derivative is taken from the output `out` (ReLU / ReLU6 / Sigmoid / Tanh all have derivatives
    that are functions of their output). With `policy.inplace` it overwrites the incoming back-prop
    dY in place (the op is dY's only reader); otherwise it goes to an extra tensor of |Y| (onert's
    `_act_back_prop_output`) which the later backward steps read instead of dY.
    """
    act = op.attrs.get("activation", "NONE") or "NONE"
    if act == "NONE":
        return
    steps = rule.backward_steps()
    if not steps:
        return
    first = steps[0]
    if ctx.policy.inplace:
        first.reads[:0] = [("fwd", out), ("bp", out)]
        first.writes.insert(0, ("bp", out))
        return
    k = len(rule.extras)
    o = ctx.operand(out)
    rule.extras.append(ExtraRequest("act_back_prop", o.shape, o.dtype, BACKWARD))
    for s in steps:
        s.reads = [("extra", k) if r == ("bp", out) else r for r in s.reads]
    first.reads[:0] = [("fwd", out), ("bp", out)]
    first.writes.insert(0, ("extra", k))




def forward_io(op) -> StepIO:
    """A forward step reads every present input and writes every output."""
    return StepIO([("fwd", i) for i in dict.fromkeys(op.inputs) if i >= 0], [("fwd", o) for o in op.outputs])


def plain_rule(op) -> OpRule:
    return OpRule(forward=forward_io(op))


def bp_targets(op, ctx, inputs=None) -> list[int]:
    """The op's non-constant inputs whose back-prop someone needs."""
    cand = op.inputs if inputs is None else inputs
    return [i for i in dict.fromkeys(cand) if i >= 0 and not ctx.is_const(i) and ctx.needs_bp(i)]
