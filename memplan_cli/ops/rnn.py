"""Recurrent layers: ONNX LSTM, GRU and RNN (torch.onnx writes nn.LSTM / nn.GRU / nn.RNN as these),
forward, reverse or bidirectional, layout 0 ([seq, batch, ...]) or 1 ([batch, seq, ...]).

Canonical ops keep ONNX's operands: X, W, R, B, sequence_lens, initial_h (, initial_c for LSTM) ->
Y, Y_h (, Y_c), with attrs `direction`, `hidden_size`, `layout`, `linear_before_reset` (GRU).
ONNX gate orders: LSTM i, o, f, c; GRU z, r, h.

Training rule (back-propagation through time, as PyTorch's LSTM / GRU cells save for it:
derivatives.yaml `_thnn_fused_lstm_cell` keeps the gates and the cell states, `_thnn_fused_gru_cell`
the gates and the hidden-side products):
- Forward also writes a workspace kept until backward (FORWARD_TO_BACKWARD): per step and direction
  the activated gates and the cell state (LSTM: i, o, f, c~, c: 5H), the gates and the hidden-side
  candidate term (GRU: z, r, n (, h R_n + Rb_n with linear_before_reset): 3H or 4H); RNN needs none
  (tanh' comes from Y). The hidden states are Y itself, kept for backward.
- calcGradient (the op trains): dW, dR, dB from a backward pass over time; reads X, Y, the
  initial states, R, the workspace and the outputs' back-props.
- calcDerivative (X or an initial state needs a back-prop): the same pass, then dX = dgates W and
  the initial states' back-props; reads W and R too. Each backward step runs its own pass over time
  into a scratch of the pre-activation gate gradients (BACKWARD, |gates| per step).
FLOPs per step and direction: forward 2·G·H·(I + H) for the products plus ~10·G·H pointwise;
backward twice the products per step that runs (dW and dR; dX and dh) plus the pointwise terms.
An initial state of batch 1 is broadcast over the batch (torch.onnx folds h0 = zeros(D, B, H) at the
export's batch); its back-prop sums the samples.
Refused at load: custom activations, clip, input_forget, peepholes (P), sequence_lens, GRU / RNN
layouts other than ONNX's.
"""
from __future__ import annotations

import numpy as np

from memplan_cli.kernels.common import reduce_to_shape
from memplan_cli.ops.base import Canon, OpDef
from memplan_cli.ops.rule import BACKWARD, FORWARD_TO_BACKWARD, ExtraRequest, OpRule, StepIO, bp_targets, \
    forward_io

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _dirs(op) -> int:
    return 2 if op.attrs.get("direction", "forward") == "bidirectional" else 1


def _ws_slots(op) -> int:
    if op.type == "LSTM":
        return 5
    if op.type == "GRU":
        return 4 if op.attrs.get("linear_before_reset") else 3
    return 0


def _dims(op, operands):
    """(seq, batch, input size, hidden size) from X and the layout."""
    xs = operands[op.inputs[0]].shape
    seq, batch = (xs[0], xs[1]) if not op.attrs.get("layout") else (xs[1], xs[0])
    return seq, batch, xs[2], int(op.attrs["hidden_size"])


def _input(op, k):
    return op.inputs[k] if k < len(op.inputs) and op.inputs[k] >= 0 else -1


# ---- rule ---------------------------------------------------------------------------------------
def rule(op, ctx) -> OpRule:
    x, w, r, b = (_input(op, k) for k in range(4))
    h0, c0 = _input(op, 5), _input(op, 6) if op.type == "LSTM" else -1
    y = op.outputs[0]
    # a constant initial state is the exporter's zeros (torch.onnx dynamo writes h0 / c0 as a float
    # initializer), not a parameter: only W, R and B train
    params = [i for i in (w, r, b) if i >= 0 and ctx.is_param(i)]
    rule_ = OpRule(forward=forward_io(op), weights=params)
    trained = params if ctx.trains(op) else []
    targets = bp_targets(op, ctx, [i for i in (x, w, r, b, h0, c0) if i >= 0 and not ctx.is_const(i)])
    if not trained and not targets:
        return rule_
    xs = ctx.operand(x).shape
    seq, batch = (xs[0], xs[1]) if not op.attrs.get("layout") else (xs[1], xs[0])
    hid, nd, slots = int(op.attrs["hidden_size"]), _dirs(op), _ws_slots(op)
    # one step's gate gradients (input and hidden side) per direction: BPTT runs step by step
    dg = ExtraRequest("rnn_dgates", (nd, batch, 2, GATES[op.type] * hid), "float32", BACKWARD)
    reads_bp = [("bp", o) for o in op.outputs if o >= 0 and ctx.needs_bp(o)]
    states = [("fwd", i) for i in (h0, c0) if i >= 0]
    common = reads_bp + [("fwd", y), ("fwd", r)] + states
    if slots:
        rule_.extras = [ExtraRequest("rnn_workspace", (seq, nd, batch, slots * hid), "float32",
                                     FORWARD_TO_BACKWARD), dg]
        rule_.forward.writes.append(("extra", 0))
        common.append(("extra", 0))
        scratch = ("extra", 1)
    else:
        rule_.extras = [dg]
        scratch = ("extra", 0)
    # X is read only for W's gradient (dW = sum over steps of gates^T x_t); W only for dX
    if trained:
        reads = common + ([("fwd", x)] if w in trained else []) + [scratch]
        rule_.calc_gradient = StepIO(reads, [scratch] + [("grad", p) for p in trained])
    if targets:
        reads = common + [("fwd", w), scratch] + ([("fwd", x)] if w in targets else [])
        rule_.calc_derivative = StepIO(reads, [scratch] + [("bp", t) for t in targets])
    return rule_


# ---- kernels ------------------------------------------------------------------------------------
def _sig(v):
    return 1.0 / (1.0 + np.exp(-v))


def _to_seq_first(a, layout, kind):
    """X [B, S, I] -> [S, B, I]; Y [B, S, D, H] -> [S, D, B, H]; Y_h [B, D, H] -> [D, B, H]."""
    if not layout or a is None:
        return a
    return np.transpose(a, {"x": (1, 0, 2), "y": (1, 2, 0, 3), "h": (1, 0, 2)}[kind])


def _from_seq_first(a, layout, kind):
    if not layout:
        return a
    return np.transpose(a, {"y": (2, 0, 1, 3), "h": (1, 0, 2)}[kind])


def _order(seq, d, direction):
    rev = direction == "reverse" or (direction == "bidirectional" and d == 1)
    return list(range(seq - 1, -1, -1)) if rev else list(range(seq))


def _params(ctx, nd, gates, hid, dtype):
    w, r = np.asarray(ctx.x(1)), np.asarray(ctx.x(2))
    b = ctx.x(3, optional=True) if len(ctx.op.inputs) > 3 and ctx.op.inputs[3] >= 0 else None
    b = np.zeros((nd, 2 * gates * hid), dtype) if b is None else np.asarray(b)
    return w, r, b[:, :gates * hid], b[:, gates * hid:]


def _state(ctx, k, nd, batch, hid, dtype):
    """Initial state k as [D, B, H]; one of batch 1 is broadcast (torch.onnx builds h0 = zeros with
    the export's batch, which re-batching does not change)."""
    if k < len(ctx.op.inputs) and ctx.op.inputs[k] >= 0:
        return np.broadcast_to(_to_seq_first(np.asarray(ctx.x(k)), ctx.attrs.get("layout"), "h"), (nd, batch, hid))
    return np.zeros((nd, batch, hid), dtype)


def forward(ctx):
    op, a = ctx.op, ctx.attrs
    layout = a.get("layout")
    x = _to_seq_first(np.asarray(ctx.x(0)), layout, "x")
    seq, batch, _ = x.shape
    hid, nd, g = int(a["hidden_size"]), _dirs(op), GATES[op.type]
    dt = x.dtype
    w, r, wb, rb = _params(ctx, nd, g, hid, dt)
    h0 = _state(ctx, 5, nd, batch, hid, dt)
    c0 = _state(ctx, 6, nd, batch, hid, dt) if op.type == "LSTM" else None
    ws = ctx.extra("rnn_workspace")
    ws = ws.reshape(seq, nd, batch, -1) if ws is not None else None
    y = np.zeros((seq, nd, batch, hid), dt)
    hn = np.zeros((nd, batch, hid), dt)
    cn = np.zeros((nd, batch, hid), dt)
    for d in range(nd):
        h, c = h0[d], (c0[d] if c0 is not None else None)
        for t in _order(seq, d, a.get("direction", "forward")):
            xw = x[t] @ w[d].T + wb[d]
            if op.type == "LSTM":
                z = xw + h @ r[d].T + rb[d]
                i, o, f, cc = _sig(z[:, :hid]), _sig(z[:, hid:2 * hid]), _sig(z[:, 2 * hid:3 * hid]), np.tanh(z[:, 3 * hid:])
                c = f * c + i * cc
                h = o * np.tanh(c)
                if ws is not None:
                    ws[t, d] = np.concatenate([i, o, f, cc, c], axis=1)
            elif op.type == "GRU":
                hr = h @ r[d][:2 * hid].T + rb[d][:2 * hid]
                zz, rr = _sig(xw[:, :hid] + hr[:, :hid]), _sig(xw[:, hid:2 * hid] + hr[:, hid:])
                if a.get("linear_before_reset"):
                    hrn = h @ r[d][2 * hid:].T + rb[d][2 * hid:]
                    n = np.tanh(xw[:, 2 * hid:] + rr * hrn)
                else:
                    hrn = None
                    n = np.tanh(xw[:, 2 * hid:] + (rr * h) @ r[d][2 * hid:].T + rb[d][2 * hid:])
                h = (1 - zz) * n + zz * h
                if ws is not None:
                    ws[t, d] = np.concatenate([zz, rr, n] + ([hrn] if hrn is not None else []), axis=1)
            else:
                h = np.tanh(xw + h @ r[d].T + rb[d])
            y[t, d] = h
        hn[d] = h
        if c is not None:
            cn[d] = c
    ctx.y(0)[...] = _from_seq_first(y, layout, "y")
    for k, v in ((1, hn), (2, cn)):
        out = ctx.y(k, optional=True) if k < len(op.outputs) and op.outputs[k] >= 0 else None
        if out is not None:
            out[...] = _from_seq_first(v, layout, "h")


def _backward(ctx, want_params: bool, want_inputs: bool) -> dict:
    """One backward pass over time, step by step (as PyTorch's cell backward): each step's
    pre-activation gate gradients (input side `gx`, hidden side `gh`: they differ for GRU's candidate)
    are accumulated into dW, dR, dB and turned into dX_t at once; the scratch holds one step's."""
    op, a = ctx.op, ctx.attrs
    layout = a.get("layout")
    yv = _to_seq_first(np.asarray(ctx.y(0)), layout, "y")
    seq, nd, batch, hid = yv.shape
    dt = yv.dtype
    g = GATES[op.type]
    r = np.asarray(ctx.x(2))
    w = np.asarray(ctx.x(1)) if want_inputs else None
    lbr = bool(a.get("linear_before_reset"))

    def dout(k, kind):
        if k >= len(op.outputs) or op.outputs[k] < 0:
            return None
        t = ctx.tg.bp.get(op.outputs[k])
        return None if t is None or t not in ctx.touched else _to_seq_first(np.asarray(ctx.dy(k)), layout, kind)
    dy, dyh, dyc = dout(0, "y"), dout(1, "h"), dout(2, "h")
    h0 = _state(ctx, 5, nd, batch, hid, dt)
    c0 = _state(ctx, 6, nd, batch, hid, dt) if op.type == "LSTM" else None
    ws = ctx.extra("rnn_workspace")
    ws = ws.reshape(seq, nd, batch, -1) if ws is not None else None
    scratch = ctx.extra("rnn_dgates").reshape(nd, batch, 2, g * hid)
    x = _to_seq_first(np.asarray(ctx.x(0)), layout, "x") if want_params else None
    inp = ctx.tg.graph.operands[op.inputs[1]].shape[2]
    out = {"dW": np.zeros((nd, g * hid, inp), dt), "dR": np.zeros_like(r), "dWb": np.zeros((nd, g * hid), dt),
           "dRb": np.zeros((nd, g * hid), dt), "dX": np.zeros((seq, batch, w.shape[2]), dt) if want_inputs else None,
           "dh0": np.zeros((nd, batch, hid), dt), "dc0": np.zeros((nd, batch, hid), dt)}
    for d in range(nd):
        order = _order(seq, d, a.get("direction", "forward"))
        dh_next = dyh[d].copy() if dyh is not None else np.zeros((batch, hid), dt)
        dc_next = dyc[d].copy() if dyc is not None else np.zeros((batch, hid), dt)
        gx, gh = scratch[d, :, 0], scratch[d, :, 1]
        for j in range(seq - 1, -1, -1):
            t = order[j]
            h_prev = yv[order[j - 1], d] if j > 0 else h0[d]
            dh = dh_next + (dy[t, d] if dy is not None else 0)
            h_in = h_prev  # what R multiplies
            if op.type == "LSTM":
                i, o, f, cc, c = (ws[t, d][:, k * hid:(k + 1) * hid] for k in range(5))
                c_prev = ws[order[j - 1], d][:, 4 * hid:] if j > 0 else c0[d]
                tc = np.tanh(c)
                dc = dc_next + dh * o * (1 - tc * tc)
                gx[...] = np.concatenate([dc * cc * i * (1 - i), dh * tc * o * (1 - o), dc * c_prev * f * (1 - f),
                                          dc * i * (1 - cc * cc)], axis=1)
                gh[...] = gx
                dh_next = gx @ r[d]
                dc_next = dc * f
            elif op.type == "GRU":
                zz, rr, n = (ws[t, d][:, k * hid:(k + 1) * hid] for k in range(3))
                dn = dh * (1 - zz) * (1 - n * n)
                dz = dh * (h_prev - n) * zz * (1 - zz)
                if lbr:
                    hrn = ws[t, d][:, 3 * hid:]
                    dr = dn * hrn * rr * (1 - rr)
                    gh[...] = np.concatenate([dz, dr, dn * rr], axis=1)
                    dh_next = dh * zz + gh @ r[d]
                else:
                    drh = dn @ r[d][2 * hid:]
                    dr = drh * h_prev * rr * (1 - rr)
                    gh[...] = np.concatenate([dz, dr, dn], axis=1)
                    dh_next = dh * zz + gh[:, :2 * hid] @ r[d][:2 * hid] + drh * rr
                gx[...] = np.concatenate([dz, dr, dn], axis=1)
            else:
                hcur = yv[t, d]
                gx[...] = dh * (1 - hcur * hcur)
                gh[...] = gx
                dh_next = gx @ r[d]
            if x is not None:
                out["dW"][d] += gx.T @ x[t]
            out["dWb"][d] += gx.sum(axis=0)
            out["dRb"][d] += gh.sum(axis=0)
            if op.type == "GRU" and not lbr:  # R_z, R_r see h; R_n sees r * h
                rr = ws[t, d][:, hid:2 * hid]
                out["dR"][d, :2 * hid] += gh[:, :2 * hid].T @ h_in
                out["dR"][d, 2 * hid:] += gh[:, 2 * hid:].T @ (rr * h_in)
            else:
                out["dR"][d] += gh.T @ h_in
            if want_inputs:
                out["dX"][t] += gx @ w[d]
        out["dh0"][d] = dh_next
        out["dc0"][d] = dc_next
    return out


def _write(target, value, layout=None, kind=None):
    if target is not None:
        v = value if kind is None else _from_seq_first(value, layout, kind)
        target[...] = reduce_to_shape(v, target.shape)  # a broadcast initial state sums its samples


def _write_weights(op, res, out_of) -> None:
    """W, R and B's results into `out_of(k)`: their gradients, or a computed weight's back-prop."""
    _write(out_of(1), res["dW"])
    _write(out_of(2), res["dR"])
    if len(op.inputs) > 3 and op.inputs[3] >= 0:
        _write(out_of(3), np.concatenate([res["dWb"], res["dRb"]], axis=1))


def calc_gradient(ctx):
    _write_weights(ctx.op, _backward(ctx, ctx.grad(1) is not None, False), ctx.grad)


def calc_derivative(ctx):
    op, layout = ctx.op, ctx.attrs.get("layout")
    res = _backward(ctx, ctx.dx(1) is not None, ctx.dx(0) is not None)
    dx = ctx.dx(0)
    if dx is not None:
        dx[...] = np.transpose(res["dX"], (1, 0, 2)) if layout else res["dX"]
    _write_weights(op, res, ctx.dx)
    for k, key in ((5, "dh0"), (6, "dc0")):
        if k < len(op.inputs) and op.inputs[k] >= 0:
            _write(ctx.dx(k), res[key], layout, "h")


def check(op, operands):
    a = op.attrs
    if a.get("hidden_size") is None:
        return "has no hidden_size"
    acts = a.get("activations")
    if acts is not None and [str(s) for s in acts] != DEFAULT_ACTS[op.type] * _dirs(op):
        return f"has activations {list(acts)}: memplan implements the defaults {DEFAULT_ACTS[op.type]}"
    if a.get("clip") is not None:
        return "clips its cell (clip): not implemented"
    if a.get("input_forget"):
        return "couples the input and forget gates (input_forget): not implemented"
    if _input(op, 7) >= 0:
        return "has peephole weights (P): not implemented"
    if _input(op, 4) >= 0:
        return "has sequence_lens (per-sample lengths): memplan runs every step of every sample"
    if a.get("direction", "forward") not in ("forward", "reverse", "bidirectional"):
        return f"has direction {a.get('direction')!r}"
    if not op.outputs or op.outputs[0] < 0:
        return "has no Y output (the hidden states backward reads)"
    seq, batch, inp, hid = _dims(op, operands)
    nd, g = _dirs(op), GATES[op.type]
    if tuple(operands[op.inputs[1]].shape) != (nd, g * hid, inp) or tuple(operands[op.inputs[2]].shape) != (nd, g * hid, hid):
        return "has W / R shapes that do not match hidden_size and direction"
    state = (nd, batch, hid) if not a.get("layout") else (batch, nd, hid)
    for k, what in ((5, "initial_h"), (6, "initial_c")):
        s = _input(op, k)
        if s >= 0 and tuple(operands[s].shape) != state:
            return f"has {what} of shape {list(operands[s].shape)}, not {list(state)} (its batch differs from X's)"
    return None


def flops(op, operands):
    seq, batch, inp, hid = _dims(op, operands)
    nd, g = _dirs(op), GATES[op.type]
    per = 2 * batch * g * hid * (inp + hid) + 10 * batch * g * hid
    fwd = seq * nd * per
    return fwd, 2 * fwd


def _batch(op, graph, shapes, batched):
    x = op.inputs[0]
    xs = shapes[x]
    seq, batch = (xs[0], xs[1]) if not op.attrs.get("layout") else (xs[1], xs[0])
    hid, nd = int(op.attrs["hidden_size"]), _dirs(op)
    lay = op.attrs.get("layout")
    shp = [(seq, nd, batch, hid) if not lay else (batch, seq, nd, hid),
           (nd, batch, hid) if not lay else (batch, nd, hid), (nd, batch, hid) if not lay else (batch, nd, hid)]
    # an initial state the exporter made at the file's batch (timm's Sequencer2d: zeros of
    # (2, B*H, hidden) folded to a constant) follows the new batch: it is a fill, not a parameter
    for k in (5, 6):
        s = _input(op, k)
        if s >= 0 and graph.operands[s].is_const and tuple(shapes[s]) != shp[1]:
            shapes[s] = shp[1]
    return [shp[k] if o >= 0 else None for k, o in enumerate(op.outputs)]


KERNELS = {"forward": forward, "calcGradient": calc_gradient, "calcDerivative": calc_derivative}
# `--profile torch`: refused, said why (measured with torch 2.14 on CPU): nn.LSTM runs oneDNN's fused
# RNN (mkldnn_rnn_layer), whose saved workspace and scratch follow oneDNN's internal padding (not
# proportional to batch x sequence x hidden); nn.GRU / nn.RNN run one cell per time step
_WHY = {"LSTM": "eager's CPU LSTM is oneDNN's fused RNN, whose workspace (kept for backward) and scratch are "
               "sized by oneDNN's internals, not modelled",
        "GRU": "eager's CPU GRU runs one cell per time step; its saved tensors are not modelled",
        "RNN": "eager's CPU RNN runs one cell per time step; its saved tensors are not modelled"}
TORCH = {t: {"refuse": lambda op, operands, why=why: why} for t, why in _WHY.items()}
OPS = [OpDef(t, rule=rule, kernels=KERNELS, flops=flops, required_inputs=3, check=check,
             nondiff_inputs=(4,), batch=_batch, bias_inputs=(3,), state_inputs=(5, 6),
             weight_inputs=(1, 2, 3), profiles={"torch": TORCH[t]},
             autocast="lower")  # mkldnn_rnn_layer, or the linear calls of the composite cells
       for t in ("LSTM", "GRU", "RNN")]


def _onnx(t):
    def convert(node) -> Canon:
        a = node.attrs
        attrs = {"direction": a.get("direction", "forward"), "hidden_size": a.get("hidden_size"),
                 "layout": int(a.get("layout", 0))}
        if t == "GRU":
            attrs["linear_before_reset"] = int(a.get("linear_before_reset", 0))
        for k in ("activations", "clip", "input_forget"):
            if k in a and (k != "input_forget" or a[k]):
                attrs[k] = a[k] if k != "activations" else tuple(s.decode() if isinstance(s, bytes) else s
                                                                   for s in a[k])
        if any(o < 0 for o in node.outputs):
            return Canon(t, attrs, outputs=_fill_absent(node, attrs))
        return Canon(t, attrs)
    return convert


def _fill_absent(node, attrs) -> list[int]:
    """A node that leaves out an output before a later one (onnx's tests write `("", Y_h, Y_c)`) still
    computes it, and backward reads Y: each becomes an internal tensor of the graph, named after the
    node, so the outputs keep their positions."""
    from memplan_cli.ir.graph import Operand

    xs, x = node.shape(0), node.input(0)
    nd, hid, lay = 2 if attrs["direction"] == "bidirectional" else 1, int(attrs["hidden_size"] or 0), attrs["layout"]
    seq, batch = (xs[0], xs[1]) if not lay else (xs[1], xs[0])
    shapes = [(seq, nd, batch, hid) if not lay else (batch, seq, nd, hid)] + [(nd, batch, hid) if not lay else
                                                                              (batch, nd, hid)] * 2
    outs = list(node.outputs)
    for k, o in enumerate(outs):
        if o < 0:
            outs[k] = len(node.operands)
            node.operands.append(Operand(outs[k], f"{node.name or node.op_type}:{('Y', 'Y_h', 'Y_c')[k]}", shapes[k],
                                         x.dtype))
    return outs


ONNX = {t: _onnx(t) for t in ("LSTM", "GRU", "RNN")}
