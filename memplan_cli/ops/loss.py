"""The loss op the pipeline appends (`passes/loss_insertion.py`): inputs (y_pred_1, label_1, y_pred_2,
label_2, ...), one pair per model output that carries a loss; output the scalar loss, the sum of one
loss per pair; `attrs["loss"]` is mse or cce. No file format has it, so it has no loader converters.

Rules (MSE and CCE alike):
- forward reads every y_pred and label, writes the loss;
- calcDerivative reads them and writes each dL/dy_pred (MSE: 2(y_pred - label)/N;
  CCE: -label / y_pred / B); there is no incoming back-prop (the seed is 1).
- A label gets a back-prop only under `policy.input_backprop` (onert computes one, nothing reads it).
- In place (`policy.inplace`): each dL/dy_pred may overwrite its own label, which nothing reads
  afterwards.
Kernels: reduction is onert's default SUM_OVER_BATCH_SIZE (`execute/kernels/loss.py`).
FLOPs per element of y_pred: MSE 3 forward (difference, square, sum), 2 backward; CCE 3 forward
(log, product, sum), 2 backward (division, scale).
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels import loss as kernels
from memplan_cli.kernels.common import store
from memplan_cli.ops.base import OpDef
from memplan_cli.ops.rule import OpRule, StepIO, bp_targets, forward_io


def loss(op, ctx) -> OpRule:
    pairs = list(zip(op.inputs[0::2], op.inputs[1::2]))
    rule = OpRule(forward=forward_io(op))
    targets = bp_targets(op, ctx, op.inputs)
    if targets:
        rule.calc_derivative = StepIO([("fwd", i) for i in dict.fromkeys(op.inputs)], [("bp", t) for t in targets])
        if ctx.policy.inplace:
            rule.inplace += [(("fwd", label), ("bp", y_pred)) for y_pred, label in pairs if y_pred in targets]
    return rule


def _kind(ctx) -> str:
    return str(ctx.attrs.get("loss", getattr(ctx.tg.config, "loss", "mse"))).lower()


def _forward(ctx):
    # the sum of one loss per (y_pred, label) pair, in the pairs' order
    kind = _kind(ctx)
    total = None
    for k in range(0, len(ctx.op.inputs), 2):
        v = kernels.VALUE[kind](_numeric(ctx.x(k)), _numeric(ctx.x(k + 1)))
        total = v if total is None else total + v
    out = ctx.y()
    store(out, np.full(out.shape, total, dtype=out.dtype))


def _numeric(a):
    # a model whose outputs are all bool (a comparison) still gets its loss (nothing trains): NumPy
    # cannot subtract bools, so they count as 0 / 1
    return a.astype(np.float32) if a.dtype == np.bool_ else a


def _backward(ctx):
    for k in range(0, len(ctx.op.inputs), 2):
        _pair_backward(ctx, k)


def _pair_backward(ctx, k: int):
    dpred, dlabel = ctx.dx(k), ctx.dx(k + 1)
    if dpred is None and dlabel is None:
        return
    y, t = ctx.x(k), ctx.x(k + 1)
    kind = _kind(ctx)
    gl = None
    if dlabel is not None:  # onert computes and keeps back-prop(y_true): dL/dt
        if kind == "mse":
            gl = (t - y) * (2.0 / y.size)
        else:
            gl = -np.log(np.clip(y, kernels.EPS, 1.0)) / (y.shape[0] if y.ndim > 1 else 1)
    if dpred is not None:  # may overwrite the label in place: the kernel computes before it stores
        kernels.DERIVATIVE[kind](y, t, dpred)
    if gl is not None:
        store(dlabel, gl)


def _flops(op, operands):
    n = sum(operands[y].num_elements for y in op.inputs[0::2])  # one loss per (y_pred, label) pair
    return 3 * n, 2 * n


LOSS_TYPE = "Loss"  # the op passes/loss_insertion.py appends (and profiles model as the loss layer)
OPS = [OpDef(LOSS_TYPE, rule=loss, kernels={"forward": _forward, "calcDerivative": _backward}, flops=_flops,
             required_inputs=2, autocast="fp32")]  # mse_loss, cross_entropy_loss: autocast's fp32 list


# ---- other runtimes' profiles (profiles/singa.py, onert/, nntrainer.py): what they know of these ops ----


def _singa_loss(op, ctx):
    """SINGA's losses take the target as a constructor argument: no back-prop for the label."""
    r = loss(op, ctx)
    label = op.inputs[1]
    if r.calc_derivative is not None:
        r.calc_derivative.writes = [w for w in r.calc_derivative.writes if w != ("bp", label)]
        if not r.calc_derivative.writes:
            r.calc_derivative = None
    r.inplace = [p for p in r.inplace if ("bp", label) not in p]
    return r


# singa: the SINGA autograd operator memplan models the op as, and SINGA's own rule
PROFILES = {"singa": {"Loss": {"operator": "MeanSquareError / SoftMaxCrossEntropy", "rule": _singa_loss}}}


def _onert_loss_usedef(op, c):
    for i in dict.fromkeys(op.inputs):
        c.use(i)
    c.bp_def(op.inputs[0])
    c.bp_def(op.inputs[1])
    c.drop_incoming(op.outputs[0])  # the loss is where back-prop starts


# onert (profiles/onert/): its training use-defs; the loss reads no optional input
PROFILES["onert"] = {"Loss": {"usedef": _onert_loss_usedef, "optional_inputs": True}}

# nntrainer (profiles/nntrainer.py): "layer", the nntrainer 0.6.0 layer the profile models the op as;
# "kind", that layer's type; "check": fn(graph, op, batchnorm) -> why the layer cannot take this op
PROFILES["nntrainer"] = {"Loss": {"layer": "loss (mse, cross_softmax, cross_sigmoid)"}}
