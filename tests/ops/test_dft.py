"""DFT (torch.fft's transforms as the dynamo exporter writes them, FNet's token mixing): the forward
kernel against onnx's reference, gradients by finite differences (the adjoint transform), verify,
what backward keeps, the torch facts."""
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, run_forward, save, training_graph

CASES = [  # opset, trailing (1 real, 2 complex), axis, inverse, onesided, dft_length
    (17, 1, 1, 0, 0, None), (17, 2, 2, 1, 0, None), (17, 1, 2, 0, 1, None), (20, 2, -2, 0, 0, None),
    (20, 1, 1, 1, 0, 8), (20, 1, 2, 0, 1, 3), (20, 1, -3, 0, 0, 4),
]


def _model(tmp_path, opset, trail, axis, inverse, onesided, length):
    x = (2, 4, 6, trail)
    rng = np.random.default_rng(3)
    inits = {"p": rng.normal(size=x[1:]).astype(np.float32)}
    ins = ["a", ""]
    if length is not None:
        inits["len"] = np.array(length, np.int64)
        ins[1] = "len"
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        inits["ax"] = np.array(axis, np.int64)
        ins.append("ax")
    else:
        attrs["axis"] = axis
    ax = axis % 4
    n = length or x[ax]
    y = list(x[:3]) + [2]
    y[ax] = n // 2 + 1 if onesided else n
    inits["q"] = rng.normal(size=y[1:]).astype(np.float32)
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]), helper.make_node("DFT", ins, ["f"], **attrs),
             helper.make_node("Mul", ["f", "q"], ["y"])]
    m = onnx_model(nodes, [("x", x)], [("y", y)], inits, opset=opset)
    return save(tmp_path, m), m, inits, x


@pytest.mark.parametrize("case", CASES)
def test_dft(tmp_path, case):
    p, m, inits, x = _model(tmp_path, *case)
    op = next(o for o in load_model(p).operations if o.type == "DFT")
    # the forward kernel against onnx's reference implementation
    a = np.random.default_rng(5).normal(size=x).astype(np.float32) + inits["p"]
    want = ReferenceEvaluator(m).run(["f"], {"x": a - inits["p"]})[0]
    got = run_forward(op, [a.astype(np.float64)], [want.shape])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the adjoint transform (onesided's zero pad, dft_length's cut or pad, a real input's real part)
    assert check_gradients(p) >= 20
    tg = training_graph(p)
    i = next(o.index for o in tg.graph.operations if o.type == "DFT")
    assert list(tg.rules[i].kept_forward()) == []  # linear: reads dY only
    check_verify(p, "-b", "3")


@pytest.mark.parametrize("attrs,why", [({"inverse": 1, "onesided": 1}, "inverse onesided")])
def test_dft_refused_in_one_line(tmp_path, attrs, why):
    from click.testing import CliRunner

    from memplan_cli.cli import main

    nodes = [helper.make_node("DFT", ["x"], ["y"], **attrs)]
    x = (2, 4, 6, 2)
    m = onnx_model(nodes, [("x", x)], [("y", (2, 4, 4, 2))], {}, opset=17)
    p = save(tmp_path, m)
    r = CliRunner().invoke(main, ["analyze", p, "-b", "2", "-O", "adam"], env={"NO_COLOR": "1"})
    out = r.output.strip()
    assert r.exit_code == 2 and len(out.splitlines()) == 1 and why in out, r.output


def test_dft_flops_count_5_n_log2_n_per_transform(tmp_path):
    from memplan_cli import ops

    p, *_ = _model(tmp_path, 17, 2, 2, 0, 0, 8)
    g = load_model(p)
    op = next(o for o in g.operations if o.type == "DFT")
    # 2 x 4 transforms of length 8: 5 * 8 * 3 each
    assert ops.get("DFT").flops(op, g.operands) == (2 * 4 * 120, 2 * 4 * 120)


def test_dft_torch_facts_save_nothing_and_are_named_estimated(tmp_path):
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig

    p, *_ = _model(tmp_path, 20, 1, 1, 0, 0, None)
    a = analyze_graph(load_model(p, batch_size=2), TrainConfig(batch_size=2, optimizer="adam", loss="mse"),
                      profile="torch")
    est = a.extras["torch"]["coverage"]["estimated"]
    assert any("DFT" in str(e) for e in est), est
    added = next(b for b in a.buffers.buffers if b.name == "a")
    assert a.buffers.steps[added.last].kind == "forward"  # the transform keeps nothing of its input
