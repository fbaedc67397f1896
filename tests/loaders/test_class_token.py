"""A class token concatenated to the patches of a batch-1 export (ViT, DeiT: the exporter folded
`cls_token.expand(B, -1, -1)` away at batch 1): re-batched, the token is broadcast over the batch,
its gradient sums the samples (finite differences), and verify runs the plan."""
import numpy as np
from onnx import helper

from memplan_cli.loaders import load_model
from tests.ops.gradcheck import check_gradients, check_verify, onnx_model, save


def _vit_like():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["patches"]),  # (1, 4, 8): patch embeddings
             helper.make_node("Concat", ["cls", "patches"], ["tokens"], axis=1),  # (1, 5, 8)
             helper.make_node("Add", ["tokens", "pos"], ["h"]),
             helper.make_node("Mul", ["h", "h"], ["y"])]
    inits = {"w": np.ones((6, 8), np.float32), "cls": np.ones((1, 1, 8), np.float32),
             "pos": np.ones((1, 5, 8), np.float32)}
    return onnx_model(nodes, [("x", (1, 4, 6))], [("y", (1, 5, 8))], inits)


def test_the_token_is_broadcast_over_the_batch_and_trains(tmp_path):
    p = save(tmp_path, _vit_like())
    g = load_model(p, batch_size=3)
    cat = next(o for o in g.operations if o.type == "Concat")
    assert cat.attrs.get("broadcast_batch") and g.operands[cat.outputs[0]].shape == (3, 5, 8)
    assert any("class token" in w for w in g.warnings)
    assert not load_model(p).operations[1].attrs.get("broadcast_batch")  # at its own batch: nothing to do
    assert check_gradients(p, batch=3) >= 8  # cls's gradient: the sum over the 3 samples
    check_verify(p, "-b", "3")
