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
    (20, 2, 2, 1, 1, 10), (20, 2, 1, 1, 1, 8), (20, 2, 2, 1, 1, 9),  # irfft: n // 2 + 1 bins in, n out
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
    y = list(x[:3]) + [1 if inverse and onesided else 2]
    y[ax] = n // 2 + 1 if onesided and not inverse else n
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


@pytest.mark.parametrize("attrs,why", [({"inverse": 1, "onesided": 1}, "without dft_length")])
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


@pytest.mark.parametrize("trail", [1, 2])
def test_dft_torch_facts(tmp_path, trail):
    # derivatives.yaml: _fft_c2c saves nothing; _fft_r2c's formula reads self.sym_size(dim.back()), which
    # autograd's codegen saves as self itself (FftR2CBackward0._saved_self); named as estimated
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig

    p, *_ = _model(tmp_path, 20, trail, 1, 0, 0, None)
    a = analyze_graph(load_model(p, batch_size=2), TrainConfig(batch_size=2, optimizer="adam", loss="mse"),
                      profile="torch")
    est = a.extras["torch"]["coverage"]["estimated"]
    assert any("DFT" in str(e) for e in est), est
    added = next(b for b in a.buffers.buffers if b.name == "a")
    assert (a.buffers.steps[added.last].kind == "forward") == (trail == 2)


def test_dft_batch_copy_follows_the_recorded_call():
    # MKL's _exec_fft folds the untransformed axes into one: a copy where a transformed axis lies
    # between two of them (fft over the tokens of (B, S, D)), none for fftn over (S, D)
    from types import SimpleNamespace as NS

    from memplan_cli.ops import dft

    opd = [NS(shape=(4, 16, 64, 2))]
    one = NS(inputs=[0], attrs={"axis": 1}, call="")
    assert dft.fft_dims(one, 3) == [1] and dft.batch_copied(one, opd)
    both = NS(inputs=[0], attrs={"axis": 1},
              call="_fft_c2c = aten._fft_c2c.default(args = (%_to_copy, [1, 2], 0, True), kwargs = {})")
    assert dft.fft_dims(both, 3) == [1, 2] and not dft.batch_copied(both, opd)
    last = NS(inputs=[0], attrs={"axis": 2}, call="")
    assert not dft.batch_copied(last, opd)


def _fx(node, call):
    # the dynamo exporter's record of the aten call a node lowers
    name, _, rest = call.partition(" = ")
    target, _, args = rest.partition("(")
    node.metadata_props.add(key="pkg.torch.onnx.fx_node",
                            value=f"%{name} : [num_users=1] = call_function[target=torch.ops.{target}]({args}")
    return node


def test_fftn_of_a_real_input_as_dynamo_writes_it(tmp_path):
    # `torch.fft.fftn(h, dim=(1, 2)).real`: the real input concatenated with a constant of zeros (eager's
    # `_to_copy` to complex, which holds no zeros), one DFT per axis, the real part gathered
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig

    x = (2, 4, 6)
    rng = np.random.default_rng(1)
    inits = {"p": rng.normal(size=x[1:]).astype(np.float32), "zeros": np.zeros(x + (1,), np.float32),
             "m1": np.array([-1], np.int64), "a1": np.array(1, np.int64), "a2": np.array(2, np.int64),
             "i0": np.array(0, np.int64), "q": rng.normal(size=x[1:]).astype(np.float32)}
    copy = "_to_copy = aten._to_copy.default(args = (%h,), kwargs = {dtype: torch.complex64})"
    fft = "_fft_c2c = aten._fft_c2c.default(args = (%_to_copy, [1, 2], 0, True), kwargs = {})"

    def model(recorded):
        mark = _fx if recorded else (lambda n, c: n)
        nodes = [helper.make_node("Add", ["x", "p"], ["h"]), helper.make_node("Unsqueeze", ["h", "m1"], ["u"]),
                 mark(helper.make_node("Concat", ["u", "zeros"], ["c"], axis=-1), copy),
                 mark(helper.make_node("DFT", ["c", "", "a2"], ["f1"]), fft),
                 mark(helper.make_node("DFT", ["f1", "", "a1"], ["f2"]), fft),
                 helper.make_node("Gather", ["f2", "i0"], ["r"], axis=3), helper.make_node("Mul", ["r", "q"], ["y"])]
        return save(tmp_path, onnx_model(nodes, [("x", x)], [("y", x)], inits, opset=20), f"m{int(recorded)}.onnx")

    def peak(path):
        a = analyze_graph(load_model(path, batch_size=2), TrainConfig(batch_size=2, optimizer="adam", loss="mse"),
                          profile="torch")
        return a.extras["torch"]["peak"] if "peak" in a.extras["torch"] else a.peak

    p1 = model(True)
    # the two DFTs recording one call are that one eager call (fuse.py): one op, no intermediate
    a = analyze_graph(load_model(p1, batch_size=2), TrainConfig(batch_size=2, optimizer="adam", loss="mse"),
                      profile="torch")
    assert [e["type"] for e in a.extras["torch"]["coverage"]["estimated"]].count("DFT") == 1
    assert check_gradients(p1) >= 20
    check_verify(p1, "-b", "2")
    assert peak(model(False)) - peak(p1) == inits["zeros"].nbytes
