"""loaders/onnx_fold.py: shape computations that onnx's shape inference leaves unknown are folded
into constants, so the exports that compute their Expand / Reshape targets at run time load."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, shape_inference

from memplan_cli.errors import ModelError
from memplan_cli.loaders import load_model
from memplan_cli.loaders.onnx_loader import _unknown_shapes
from tests.ops.gradcheck import analyze_json, check_verify, onnx_model, save


def _torchscript_expand(extra_nodes=(), extra_inits=None):
    """x (2, 3, 4) + Expand(p (1, 1, 4), Where(Equal(s, -1), ConstantOfShape(..), s)) as TorchScript
    writes `p.expand(2, -1, -1)`, then Reshape(y, Concat(Gather(Shape(y), 0), [-1]))."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        helper.make_node("Constant", [], ["s"], value=helper.make_tensor("sv", TensorProto.INT64, [3], [2, -1, -1])),
        helper.make_node("Equal", ["s", "m1"], ["eq"]),
        helper.make_node("ConstantOfShape", ["three"], ["ones"],
                         value=helper.make_tensor("one", TensorProto.INT64, [1], [1])),
        helper.make_node("Where", ["eq", "ones", "s"], ["target"]),
        helper.make_node("Expand", ["p", "target"], ["pe"]),
        helper.make_node("Add", ["x", "pe"], ["a"]),
        helper.make_node("Shape", ["a"], ["sa"]),
        helper.make_node("Gather", ["sa", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus1"], ["flat"], axis=0),
        helper.make_node("Reshape", ["a", "flat"], ["y"]),
        *extra_nodes,
    ]
    inits = {"p": np.linspace(-1, 1, 4).reshape(1, 1, 4).astype(np.float32), "m1": i64(-1), "three": i64([3]),
             "zero": i64(0), "ax0": i64(0), "minus1": i64([-1]), **(extra_inits or {})}
    return onnx_model(nodes, [("x", (2, 3, 4))], [("y", (2, 12))], inits)


def test_inference_alone_leaves_the_expand_unknown():
    # the premise: without folding, memplan would refuse this graph (no static shape for 'pe')
    m = shape_inference.infer_shapes(_torchscript_expand(), strict_mode=False, data_prop=True)
    assert _unknown_shapes(m)


def test_folded_shapes_load_analyse_and_verify(tmp_path):
    p = save(tmp_path, _torchscript_expand())
    g = load_model(p)
    shapes = {o.name: tuple(o.shape) for o in g.operands}
    assert shapes["pe"] == (2, 1, 4) and shapes["y"] == (2, 12)
    # the shape subgraph is gone: no Shape / Gather / Where / Equal op is left to count or run
    assert {o.type for o in g.operations} >= {"Add", "Reshape"}
    assert not {"Shape", "Where", "Equal", "ConstantOfShape", "Concat"} & {o.type for o in g.operations}
    doc = analyze_json(p, "-t", "all")
    assert doc["categories"]["trainable"]["naive"] >= 16  # p trains
    check_verify(p, "-b", "2")


def test_float_results_are_never_folded(tmp_path):
    # a float ConstantOfShape (an attention-mask style tensor) stays an op of the graph
    extra = [helper.make_node("ConstantOfShape", ["sy"], ["fz"],
                              value=helper.make_tensor("z", TensorProto.FLOAT, [1], [0.5])),
             helper.make_node("Shape", ["y"], ["sy"]),
             helper.make_node("Add", ["y", "fz"], ["y2"])]
    m = _torchscript_expand(extra)
    m.graph.output[0].name = "y2"
    g = load_model(save(tmp_path, m))
    assert "fz" in {o.name for o in g.operands}


def test_unfoldable_unknown_shape_is_still_one_line(tmp_path):
    # a shape that depends on data with no bound memplan takes (Unique; NonZero's count is taken at its
    # bound: tests/loaders/test_data_sized.py) stays unknown: refused, naming the tensor
    nodes = [helper.make_node("Unique", ["x"], ["nz"]), helper.make_node("Cast", ["nz"], ["y"], to=1)]
    m = onnx_model(nodes, [("x", (2, 3))], [("y", (0,))], {})
    with pytest.raises(ModelError, match="static shapes|no shape"):
        load_model(save(tmp_path, m))


def test_a_reshape_target_computed_through_float_scalars_folds(tmp_path):
    """MobileViT's TorchScript export: new_h = int(ceil(h / p) * p) as Constant -> Ceil -> Mul -> Cast
    (floats) -> Concat -> Reshape. The integer result folds; the float nodes are dropped (never made
    float initializers, which would read as weights)."""
    f = lambda name, v: helper.make_node("Constant", [], [name], value=helper.make_tensor(  # noqa: E731
        name + "v", TensorProto.FLOAT, [], [v]))
    nodes = [f("h", 1.5), helper.make_node("Ceil", ["h"], ["hc"]), f("p", 4.0),
             helper.make_node("Mul", ["hc", "p"], ["hp"]),
             helper.make_node("Cast", ["hp"], ["hi"], to=TensorProto.INT64),
             helper.make_node("Unsqueeze", ["hi", "ax0"], ["h1"]),
             helper.make_node("Concat", ["minus1", "h1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Mul", ["r", "w"], ["y"])]
    m = onnx_model(nodes, [("x", (2, 16))], [("y", (4, 8))],
                   {"ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64),
                    "w": np.ones((8,), np.float32)})
    p = save(tmp_path, m)
    g = load_model(p)
    assert [o.type for o in g.operations] == ["Reshape", "Mul"]
    r = next(o for o in g.operations if o.type == "Reshape")
    assert g.operands[r.outputs[0]].shape == (4, 8)
    assert not any(o.is_const and o.dtype.startswith("float") and o.name in ("hc", "hp") for o in g.operands)
    check_verify(p)


def test_an_index_table_the_stripper_left_out_is_unknown_not_an_error():
    """An int64 initializer above the stripper's MAX_KEEP (torchvision SwinV2's 4096-entry relative
    position index) has no bytes in the stripped model: folding treats it as unknown (it raised
    'cannot reshape array of size 0')."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from memplan_cli.loaders.onnx_fold import _known_initializers
    from memplan_cli.loaders.onnx_strip import MAX_KEEP, strip_model

    big = numpy_helper.from_array(np.arange(MAX_KEEP + 36, dtype=np.int64), "idx")
    small = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    g = helper.make_graph([helper.make_node("Gather", ["t", "idx"], ["y"])], "g",
                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [200])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [MAX_KEEP + 36])], [big, small])
    data = helper.make_model(g).SerializeToString()
    stripped = onnx.load_from_string(strip_model(data, len(data))[0])
    known = _known_initializers(stripped)
    assert "idx" not in known and list(known["shape"]) == [2, 3]


def test_an_empty_slice_of_a_shape_vector_folds_away(tmp_path):
    """TorchScript writes `x.reshape(*x.shape[:0], -1, 4)` (timm's hiera and gcvit) as
    Slice(Shape(x), 0, 0) -> an int64 vector with no elements -> Concat into the Reshape target. Every
    shape is static, yet the empty vector was refused ("has a zero dimension 0"); it folds away."""
    i64 = lambda v: np.array(v, np.int64)  # noqa: E731
    nodes = [helper.make_node("Add", ["x", "p"], ["a"]),
             helper.make_node("Shape", ["a"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "zero", "ax0"], ["none"]),
             helper.make_node("Concat", ["none", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["a", "target"], ["y"])]
    inits = {"p": np.ones((1, 3, 4), np.float32), "zero": i64([0]), "ax0": i64([0]), "tail": i64([-1, 4])}
    p = save(tmp_path, onnx_model(nodes, [("x", (2, 3, 4))], [("y", (6, 4))], inits))
    g = load_model(p)
    assert [o.type for o in g.operations] == ["Add", "Reshape"]
    assert {o.name: tuple(o.shape) for o in g.operands}["y"] == (6, 4)
    check_verify(p)


def _scatter_reduce_if(tmp_path):
    """TorchScript's scatter_reduce symbolic (opset 16+): its inputs and result pass through an If on the
    data's rank (`If(Size(Shape(data)) == 0)`: reshaped to 1-D, else Identities), data zeros, the index
    an Expand of a (1, 64, 40) buffer (too large for the shape folding here: memplan folds it), the
    updates x + p; the result read back at each position."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64

    def branch(name, kind, ins, outs):
        nodes = [helper.make_node("Constant", [], ["flat"], value=helper.make_tensor("fv", i64, [1], [-1]))] \
            if kind == "Reshape" else []
        nodes += [helper.make_node(kind, [i, "flat"] if kind == "Reshape" else [i], [o]) for i, o in zip(ins, outs)]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(o, f, None) for o in outs])

    ins = ["base", "idx", "h"]
    nodes = [helper.make_node("Add", ["x", "p"], ["h"]),
             helper.make_node("Expand", ["seg", "shape"], ["idx"]),
             helper.make_node("Constant", [], ["base"], value=helper.make_tensor("z", f, [2, 3, 40], [0.0] * 240)),
             helper.make_node("Shape", ["base"], ["sb"]),
             helper.make_node("Size", ["sb"], ["rank"]),
             helper.make_node("Equal", ["rank", "zero"], ["cond"]),
             helper.make_node("If", ["cond"], ["i0", "i1", "i2"],
                              then_branch=branch("t", "Reshape", ins, ["r0", "r1", "r2"]),
                              else_branch=branch("e", "Identity", ins, ["d0", "d1", "d2"])),
             helper.make_node("ScatterElements", ["i0", "i1", "i2"], ["s"], axis=1, reduction="max"),
             helper.make_node("If", ["cond"], ["s2"], then_branch=branch("t2", "Squeeze", ["s"], ["q"]),
                              else_branch=branch("e2", "Identity", ["s"], ["n"])),
             helper.make_node("GatherElements", ["s2", "idx"], ["g"], axis=1),
             helper.make_node("Mul", ["h", "g"], ["y"])]
    inits = {"p": np.linspace(-1, 1, 2560).reshape(1, 64, 40).astype(np.float32),
             "seg": (np.arange(64) % 3).reshape(1, 64, 1).repeat(40, 2).astype(np.int64),
             "shape": np.array([2, 64, 40], np.int64), "zero": np.array(0, np.int64)}
    return save(tmp_path, onnx_model(nodes, [("x", (2, 64, 40))], [("y", (2, 64, 40))], inits, opset=18))


def test_an_if_on_a_known_condition_is_its_branch(tmp_path):
    p = _scatter_reduce_if(tmp_path)
    g = load_model(p)
    assert "If" not in {o.type for o in g.operations}
    scatter = next(o for o in g.operations if o.type == "ScatterElements")
    gather = next(o for o in g.operations if o.type == "GatherElements")
    # the else branch's Identity of the folded index is that index, not a copy of it
    assert scatter.inputs[1] == gather.inputs[1] and g.operands[scatter.inputs[1]].broadcast_of == (1, 64, 40)
    assert tuple(g.operands[scatter.outputs[0]].shape) == (2, 3, 40)
    check_verify(p, "-b", "2")


def test_the_torch_profile_holds_a_folded_expand_of_a_buffer_at_the_buffer_s_size(tmp_path):
    from memplan_cli.analysis import analyze_graph
    from memplan_cli.config import TrainConfig

    a = analyze_graph(load_model(_scatter_reduce_if(tmp_path)), TrainConfig(loss="mse", optimizer="adam"),
                      profile="torch")
    held = {b.name: b.size for b in a.buffers.buffers if b.first == 0 and b.category == "trainable"}
    assert held["idx"] == 64 * 40 * 8  # the (1, 64, 40) int64 buffer eager holds, not its (2, 64, 40) expand


def _c(name, v, dtype=TensorProto.INT64, dims=None):
    v = list(v)
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name + "_v", dtype,
                                                                             [len(v)] if dims is None else dims, v))


def _global_tokens():
    """Longformer's global attention, on a mask computed from shapes (TorchScript, no mask given):
    ones(2, 16) * (global + 1), global marking position 0 of each row; `mask > 1` gives the global
    tokens; their indices (`nonzero(as_tuple=True)`: NonZero, Transpose, SplitToSequence, SequenceAt)
    and the largest count per row (a Range's length) size what gathers them."""
    f1 = helper.make_tensor("f1", TensorProto.FLOAT, [1], [1.0])
    i0 = helper.make_tensor("i0", TensorProto.INT64, [1], [0])
    nodes = [
        _c("shape", [2, 16]), _c("col0", [0, 0, 1, 0], dims=[2, 2]), _c("one2", [1, 1]), _c("k1", [1]),
        _c("ax1", [1]), _c("p1", [1], dims=[]), _c("zero0", [0], dims=[]), _c("one0", [1], dims=[]),
        _c("onef", [1.0], TensorProto.FLOAT, dims=[]), _c("s1", [1], dims=[]),
        helper.make_node("ConstantOfShape", ["shape"], ["ones"], value=f1),
        helper.make_node("ConstantOfShape", ["shape"], ["g0"], value=i0),
        helper.make_node("ScatterND", ["g0", "col0", "one2"], ["glob"]),
        helper.make_node("Add", ["glob", "k1"], ["glob1"]),
        helper.make_node("Cast", ["glob1"], ["globf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["ones", "globf"], ["mask"]),
        helper.make_node("Greater", ["mask", "onef"], ["is_glob"]),
        helper.make_node("Cast", ["is_glob"], ["is_glob_i"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["is_glob_i", "ax1"], ["count"], keepdims=0),
        helper.make_node("ReduceMax", ["count"], ["maxcount"], keepdims=0),
        helper.make_node("NonZero", ["is_glob"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
        # TorchScript's unbind: a scalar split of 1 with keepdims 0, 1-d pieces as in ONNX Runtime
        helper.make_node("SplitToSequence", ["nzt", "s1"], ["seq"], axis=1, keepdims=0),
        helper.make_node("SequenceAt", ["seq", "p1"], ["pos"]),
        helper.make_node("Range", ["zero0", "maxcount", "one0"], ["r"]),
        helper.make_node("Gather", ["x", "r"], ["xg"], axis=1),
        helper.make_node("Gather", ["x", "pos"], ["xp"], axis=1),
        helper.make_node("Concat", ["xg", "xp"], ["y"], axis=1),
    ]
    m = onnx_model(nodes, [("x", (2, 16, 4))], [("y", (2, 3, 4))], {})
    m.producer_name = "pytorch"
    return m


def test_indices_of_a_mask_computed_from_shapes_fold(tmp_path):
    # the float mask (32 elements) and the sequence of index vectors are known, never initializers;
    # what they give (the positions, the Range) is static, so nothing is sized from the data
    p = save(tmp_path, _global_tokens())
    g = load_model(p)
    shapes = {o.name: tuple(o.shape) for o in g.operands}
    assert shapes["xg"] == (2, 1, 4) and shapes["xp"] == (2, 2, 4) and shapes["y"] == (2, 3, 4)
    assert "data_sized" not in g.metadata
    assert not {"NonZero", "SplitToSequence", "SequenceAt", "Range", "Mul"} & {o.type for o in g.operations}
    assert analyze_json(p, "-p", "torch")["figures"]["torch"]["peak"] > 0
    check_verify(p)


def test_a_known_value_over_the_limit_is_not_computed(tmp_path, monkeypatch):
    # the work a round spends on values it only reads is bounded: over it, the counts are not computed
    # and are taken under the data-sized assumption instead (NonZero at its bound)
    from memplan_cli.loaders import onnx_fold

    monkeypatch.setattr(onnx_fold, "MAX_KNOWN_ELEMENTS", 16)
    g = load_model(save(tmp_path, _global_tokens()))
    assert g.metadata["data_sized"]["rule"] == "at the bound"


def _tensor_split(tmp_path, as_loop=True, trips=None, cond=None, name="m.onnx"):
    """y = cat(sigmoid(a), b * 2, tanh(c)) of x (2, 6, 4) + p, cut along axis 1 at the indices [1, 3]
    (`torch.tensor_split(h, [1, 3], 1)`). `as_loop`: as TorchScript's symbolic writes it (opset 13's
    `tensor_split`): a Loop over the indices' count slicing from each index (a 0 in front) to the next
    into a sequence (SequenceEmpty, SequenceInsert), the last piece inserted after it, the pieces read
    by SequenceAt; else three Slices. `trips`: the trip count's value name instead of the indices'
    count; `cond`: the body's condition output computed by this node instead of an Identity of true."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    body = [helper.make_node("Gather", ["starts", "i"], ["s0"], axis=0),
            helper.make_node("Add", ["i", "one"], ["i1"]),
            helper.make_node("Gather", ["starts", "i1"], ["s1"], axis=0),
            helper.make_node("Slice", ["h", "s0", "s1", "axis"], ["piece"]),
            helper.make_node("SequenceInsert", ["seq_in", "piece"], ["seq_out"]),
            cond or helper.make_node("Identity", ["true"], ["c_out"])]
    g = helper.make_graph(body, "body", [helper.make_tensor_value_info("i", i64, []),
                                         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                                         helper.make_tensor_value_info("seq_in", f, None)],
                          [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("seq_out", f, None)])
    g.output[1].type.CopyFrom(helper.make_sequence_type_proto(helper.make_tensor_type_proto(f, None)))
    g.input[2].type.CopyFrom(helper.make_sequence_type_proto(helper.make_tensor_type_proto(f, None)))
    nodes = [helper.make_node("Add", ["x", "p"], ["h"])]
    if as_loop:
        nodes += [helper.make_node("Shape", ["indices"], ["n_idx"]),
                  helper.make_node("Gather", ["n_idx", "zero"], ["n"], axis=0),
                  helper.make_node("Unsqueeze", ["n", "ax0"], ["trips"]),
                  helper.make_node("Cast", ["one"], ["true"], to=TensorProto.BOOL),
                  helper.make_node("Concat", ["zero1", "indices"], ["starts"], axis=0),
                  helper.make_node("SequenceEmpty", [], ["empty"], dtype=f),
                  helper.make_node("Loop", [trips or "trips", "true", "empty"], ["pieces"], body=g),
                  helper.make_node("Gather", ["starts", "minus1"], ["last0"], axis=0),
                  helper.make_node("Unsqueeze", ["last0", "ax0"], ["last"]),
                  helper.make_node("Shape", ["h"], ["sh"]),
                  helper.make_node("Gather", ["sh", "axis"], ["end"], axis=0),
                  helper.make_node("Slice", ["h", "last", "end", "axis"], ["tail"]),
                  helper.make_node("SequenceInsert", ["pieces", "tail"], ["all"]),
                  *[helper.make_node("SequenceAt", ["all", f"at{k}"], [v]) for k, v in enumerate("abc")]]
    else:
        nodes += [helper.make_node("Slice", ["h", s, e, "axis"], [v])
                  for s, e, v in (("zero1", "at1v", "a"), ("at1v", "at3v", "b"), ("at3v", "at6v", "c"))]
    nodes += [helper.make_node("Sigmoid", ["a"], ["ga"]),
              helper.make_node("Mul", ["b", "two"], ["mb"]),
              helper.make_node("Tanh", ["c"], ["tc"]),
              helper.make_node("Concat", ["ga", "mb", "tc"], ["y"], axis=1)]
    a = lambda v: np.array(v, np.int64)  # noqa: E731
    inits = {"p": np.linspace(-1, 1, 24).reshape(1, 6, 4).astype(np.float32), "indices": a([1, 3]),
             "zero": a(0), "zero1": a([0]), "ax0": a([0]), "one": a(1), "minus1": a(-1), "axis": a([1]),
             "two": np.array(2.0, np.float32), "at0": a(0), "at1": a(1), "at2": a(-1), "at1v": a([1]),
             "at3v": a([3]), "at6v": a([6])}
    return save(tmp_path, onnx_model(nodes, [("x", (2, 6, 4))], [("y", (2, 6, 4))], inits), name)


def test_torchscript_s_tensor_split_loop_is_its_slices(tmp_path):
    # the Loop's trip count (the indices' count) is known: its body runs twice, each slicing one
    # interval into the sequence, and the pieces SequenceAt reads are those Slices
    p = _tensor_split(tmp_path)
    g = load_model(p)
    kinds = {o.type for o in g.operations}
    assert not {"Loop", "SequenceEmpty", "SequenceInsert", "SequenceAt"} & kinds
    shapes = {o.name: tuple(o.shape) for o in g.operands}
    assert (shapes["a"], shapes["b"], shapes["c"]) == ((2, 1, 4), (2, 2, 4), (2, 3, 4))
    assert sum(o.type == "Slice" for o in g.operations) == 3
    check_verify(p)
    # the same figures as the cut written as three Slices
    q = _tensor_split(tmp_path, as_loop=False, name="slices.onnx")
    for args in (("-p", "torch", "-O", "adam", "-l", "cce"), ()):
        mine, theirs = analyze_json(p, *args), analyze_json(q, *args)
        assert mine["peak"]["bytes"] == theirs["peak"]["bytes"] > 0
        assert mine["peak"]["categories"] == theirs["peak"]["categories"]


@pytest.mark.parametrize("how", ["trip count from the data", "may stop early"])
def test_a_loop_not_known_to_run_every_iteration_stays_refused(tmp_path, how):
    if how == "trip count from the data":  # the count is an input's value: the data decides it
        p = _tensor_split(tmp_path, trips="count")
        m = onnx.load(p)
        m.graph.input.append(helper.make_tensor_value_info("count", TensorProto.INT64, []))
        onnx.save(m, p)
    else:  # the body's condition is computed (i < 1): it may stop before the count
        p = _tensor_split(tmp_path, cond=helper.make_node("Less", ["i", "one"], ["c_out"]))
    with pytest.raises(ModelError, match="sequence of tensors|Loop"):
        load_model(p)
