"""--lora-targets, --train ops: and --freeze ops: match the op types and names a user reads in the file
or in `memplan inspect` (issue 27 item 6): the file's types (ONNX MatMul, Gemm; TFLite FULLY_CONNECTED),
the ops a loader fused (an ONNX MatMul+Add becomes one FullyConnected) and the fused nodes' names."""
import onnx
import pytest

from memplan_cli import analyze
from memplan_cli.config import TrainConfig, op_names, op_types
from memplan_cli.loaders import load_model
from memplan_cli.passes.lora import lora_targets

BERT = "tests/corpus/bert_tiny_dynamo.onnx"  # dynamo: MatMul + Add pairs, fused by the loader
TWO_HEAD_TS = "tests/multihead/torch_two_head_ts.onnx"  # TorchScript: nn.Linear as Gemm
KERAS = "tests/multihead/keras_three_head.tflite"  # FULLY_CONNECTED


def _grads(path, **kw):
    tg = analyze(path, batch_size=2, **kw).analysis.buffers.training_graph
    return sorted(tg.graph.operands[w].name for w in tg.grad)


def test_fused_matmul_add_answers_to_the_files_types_and_its_matmul_node_name():
    g = load_model(BERT)
    fused = [op for op in g.operations if op.source_type == "MatMul+Add"]
    assert fused
    m = onnx.load(BERT, load_external_data=False)
    matmuls = {n.name for n in m.graph.node if n.op_type == "MatMul"}
    for op in fused:
        assert {"FullyConnected", "MatMul", "Add"} <= set(op_types(op))
        assert set(op_names(op)) & matmuls  # the file's MatMul node is still findable by its name
    by_file = lora_targets(g, ("MatMul",))
    assert by_file == [op.index for op in fused]
    # the classifier is a Gemm in the file: FullyConnected takes both
    assert sorted(by_file + lora_targets(g, ("Gemm",))) == lora_targets(g, ("FullyConnected",))
    one = next(n for n in op_names(fused[0]) if n in matmuls)
    assert lora_targets(g, (one,)) == [fused[0].index]


def test_train_and_freeze_ops_match_the_file_types():
    assert _grads(BERT, train="ops:MatMul,ops:Gemm") == _grads(BERT, train="ops:FullyConnected")
    frozen = _grads(BERT, freeze="ops:MatMul,ops:Gemm")
    assert frozen == _grads(BERT, freeze="ops:FullyConnected") and frozen != _grads(BERT)
    assert _grads(TWO_HEAD_TS, freeze="ops:Gemm") == _grads(TWO_HEAD_TS, freeze="ops:FullyConnected")
    assert _grads(KERAS, train="ops:FULLY_CONNECTED") == _grads(KERAS, train="ops:FullyConnected") == _grads(KERAS)
    tl = analyze(KERAS, lora=2, lora_targets="FULLY_CONNECTED").analysis.buffers.training_graph
    assert len(tl.lora.adapters) == sum(op.type == "FullyConnected" for op in load_model(KERAS).operations)


def test_a_glob_that_matches_nothing_is_still_an_error():
    from memplan_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="matches no op"):
        TrainConfig(train=("ops:Conv",)).selected_ops(load_model(BERT))
