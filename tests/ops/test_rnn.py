"""ops/rnn.py: ONNX LSTM / GRU / RNN (torch.onnx's nn.LSTM / nn.GRU / nn.RNN): forward against
onnx.reference, back-propagation through time by finite differences (every direction, both layouts,
GRU with and without linear_before_reset), the workspace kept for backward, verify, refusals."""
import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.cli import main
from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph

G = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _weights(t, nd, H, I, seed=0):
    rng = np.random.default_rng(seed)
    g = G[t]
    return {"W": rng.normal(0, .4, (nd, g * H, I)).astype(np.float32),
            "R": rng.normal(0, .4, (nd, g * H, H)).astype(np.float32),
            "B": rng.normal(0, .2, (nd, 2 * g * H)).astype(np.float32)}


def _attrs(t, direction, layout, lbr, H):
    a = dict(hidden_size=H, direction=direction)
    if layout:
        a["layout"] = 1
    if t == "GRU":
        a["linear_before_reset"] = lbr
    return a


def _model(t, direction="forward", layout=0, lbr=1, S=4, B=2, I=3, H=5):
    """x -> Add(p) -> RNN -> sum(Y) + sum(Y_h) (+ sum(Y_c)): p's gradient flows through dX."""
    nd = 2 if direction == "bidirectional" else 1
    inits = _weights(t, nd, H, I)
    inits["p"] = np.linspace(-1, 1, S * I).reshape((S, 1, I) if not layout else (1, S, I)).astype(np.float32)
    outs = ["Y", "Yh"] + (["Yc"] if t == "LSTM" else [])
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node(t, ["a", "W", "R", "B"], outs, **_attrs(t, direction, layout, lbr, H))]
    sums = []
    for o in outs:
        nodes.append(helper.make_node("ReduceSum", [o], [o + "_s"], keepdims=0))
        sums.append(o + "_s")
    nodes.append(helper.make_node("Sum", sums, ["z"]))
    return onnx_model(nodes, [("x", (S, B, I) if not layout else (B, S, I))], [("z", ())], inits)


CASES = [(t, d, lay, lbr) for t in ("RNN", "LSTM", "GRU") for d in ("forward", "reverse", "bidirectional")
         for lay in (0, 1) for lbr in ((0, 1) if t == "GRU" else (1,))]


@pytest.mark.parametrize("t,direction,layout,lbr", [c for c in CASES if c[2] == 0])
def test_forward_matches_onnx_reference(tmp_path, t, direction, layout, lbr):
    S, B, I, H = 4, 2, 3, 5
    nd = 2 if direction == "bidirectional" else 1
    inits = _weights(t, nd, H, I, seed=1)
    rng = np.random.default_rng(2)
    inits["h0"] = rng.normal(0, .5, (nd, B, H)).astype(np.float32)
    ins = ["x", "W", "R", "B", "", "h0"]
    if t == "LSTM":
        inits["c0"] = rng.normal(0, .5, (nd, B, H)).astype(np.float32)
        ins.append("c0")
    outs = ["Y", "Yh"] + (["Yc"] if t == "LSTM" else [])
    node = helper.make_node(t, ins, outs, **_attrs(t, direction, layout, lbr, H))
    m = onnx_model([node], [("x", (S, B, I))], [(o, (S, nd, B, H) if o == "Y" else (nd, B, H)) for o in outs], inits)
    xv = rng.normal(size=(S, B, I)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})
    op = next(o for o in load_model(save(tmp_path, m)).operations if o.type == t)
    vals = {"x": xv, **inits}
    got_all = run_forward(op, [vals[n] if n else None for n in ins], [w.shape for w in want], np.float32)
    for got, w in zip(got_all, want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t,direction,layout,lbr", CASES)
def test_backprop_through_time_by_finite_differences(tmp_path, t, direction, layout, lbr):
    p = save(tmp_path, _model(t, direction, layout, lbr))
    assert check_gradients(p) >= 90  # W, R, B and p (through dX), 12 samples each, both policies


@pytest.mark.parametrize("t", ["RNN", "LSTM", "GRU"])
def test_workspace_kept_for_backward_and_verify(tmp_path, t):
    S, B, H = 4, 2, 5
    p = save(tmp_path, _model(t, "bidirectional"))
    tg = training_graph(p)
    k = next(o.index for o in tg.graph.operations if o.type == t)
    ws = [tg.tensors[e] for e in tg.extras.get(k, []) if tg.tensors[e].role == "extra:rnn_workspace"]
    slots = {"LSTM": 5, "GRU": 4, "RNN": 0}[t]  # i, o, f, c~, c | z, r, n, h R_n + Rb_n | none: tanh' from Y
    assert [w.shape for w in ws] == ([(S, 2, B, slots * H)] if slots else [])
    kept = {tg.graph.operands[i].name for i in tg.rules[k].kept_forward()}
    assert {"a", "Y", "R"} <= kept  # X for dW, the hidden states, R to carry dh back
    check_verify(p)
    check_verify(p, "-O", "adam")


@pytest.mark.parametrize("attrs,what", [({"clip": 3.0}, "clip"), ({"input_forget": 1}, "input_forget"),
                                        ({"activations": ["Relu", "Tanh", "Tanh"]}, "activations")])
def test_unsupported_forms_are_one_line(tmp_path, attrs, what):
    inits = _weights("LSTM", 1, 5, 3)
    m = onnx_model([helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y"], hidden_size=5, **attrs)],
                   [("x", (4, 2, 3))], [("Y", (4, 1, 2, 5))], inits)
    r = CliRunner().invoke(main, ["analyze", save(tmp_path, m)])
    assert r.exit_code == 2 and what in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_constant_initial_state_is_not_a_parameter(tmp_path):
    """torch.onnx dynamo writes nn.LSTM's zero h0 / c0 as a float initializer: it gets no gradient and
    no optimizer state (only W, R and B train)."""
    from tests.ops.gradcheck import analyze_json

    inits = _weights("LSTM", 1, 5, 3)
    inits["h0"] = np.zeros((1, 1, 5), np.float32)
    m = onnx_model([helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "h0"], ["Y"], hidden_size=5, layout=1)],
                   [("x", (1, 4, 3))], [("Y", (1, 4, 1, 5))], inits)  # batch first: -b 2 re-batches dim 0
    p = save(tmp_path, m)
    doc = analyze_json(p, "-O", "adam")
    want = sum((n * 4 + 15) // 16 * 16 for n in (4 * 5 * 3, 4 * 5 * 5, 8 * 5))
    assert doc["categories"]["gradient"]["naive"] == want
    check_verify(p, "-b", "2")  # h0 of batch 1 broadcasts over the re-batched samples


@pytest.mark.parametrize("t,direction,layout", [("LSTM", "reverse", 0), ("GRU", "bidirectional", 0),
                                                ("RNN", "bidirectional", 1)])
def test_a_node_without_y_keeps_y_h_in_its_place(tmp_path, t, direction, layout):
    """onnx's own backend tests write `LSTM(...) -> ("", Y_h, Y_c)`: Y left out. Y_h must stay output 1
    (read as Y it was mis-sized and verify crashed); Y becomes an internal tensor backward reads."""
    S, B, I, H = 4, 2, 3, 5
    nd = 2 if direction == "bidirectional" else 1
    inits = _weights(t, nd, H, I, seed=3)
    outs = ["", "Yh"] + (["Yc"] if t == "LSTM" else [])
    node = helper.make_node(t, ["x", "W", "R", "B"], outs, **_attrs(t, direction, layout, 1, H))
    hs = (nd, B, H) if not layout else (B, nd, H)
    m = onnx_model([node], [("x", (S, B, I) if not layout else (B, S, I))], [(o, hs) for o in outs if o], inits)
    xv = np.random.default_rng(4).normal(size=(S, B, I) if not layout else (B, S, I)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": xv})
    p = save(tmp_path, m)
    op = next(o for o in load_model(p).operations if o.type == t)
    g = load_model(p)
    assert [g.operands[o].name for o in op.outputs[1:]] == [o for o in outs if o]
    assert g.operands[op.outputs[0]].shape == ((S, nd, B, H) if not layout else (B, S, nd, H))
    got = run_forward(op, [xv, inits["W"], inits["R"], inits["B"]], [(S, nd, B, H) if not layout else (B, S, nd, H)]
                      + [w.shape for w in want], np.float32)
    for a, w in zip(got[1:], want):
        np.testing.assert_allclose(a, w, rtol=1e-5, atol=1e-6)
    check_verify(p)


def test_an_lstm_without_y_h_keeps_y_c_in_its_place(tmp_path):
    """("Y", "", "Y_c"): Y_h becomes an internal tensor, Y_c stays output 2 (not read as Y_h)."""
    S, B, I, H = 3, 2, 3, 4
    inits = _weights("LSTM", 1, H, I, seed=5)
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["Y", "", "Yc"], hidden_size=H)
    m = onnx_model([node], [("x", (S, B, I))], [("Y", (S, 1, B, H)), ("Yc", (1, B, H))], inits)
    p = save(tmp_path, m)
    g = load_model(p)
    op = next(o for o in g.operations if o.type == "LSTM")
    assert [g.operands[o].name for o in op.outputs] == ["Y", "LSTM:Y_h", "Yc"]
    check_verify(p)


def test_an_unknown_op_with_an_absent_output_between_others_loads(tmp_path):
    """ONNX Attention (opset 23) writes ("Y", "", "", "qk_matmul_output"); memplan has no converter for it:
    its absent outputs are left out (a seeded source in verify)."""
    q = (2, 3, 4, 8)
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y", "", "", "qk"], qk_matmul_output_mode=0)
    m = onnx_model([node], [("Q", q), ("K", q), ("V", q)], [("Y", q), ("qk", (2, 3, 4, 4))], {}, opset=23)
    m.ir_version = 10
    p = save(tmp_path, m)
    op = load_model(p).operations[0]
    assert op.type == "Attention" and len(op.outputs) == 2 and min(op.outputs) >= 0
    check_verify(p)
