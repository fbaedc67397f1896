"""The singa profile: SINGA's lifetimes on hand-derived small graphs, and its online pool replayed by
hand (first fit over the free blocks in address order, coalescing on free), including a case where
fragmentation takes the pool above the lower bound."""
import json
import os

import jsonschema
import pytest
from click.testing import CliRunner

from memplan_cli.analysis import analyze_graph
from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.errors import ConfigError
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.profiles.singa import PROFILE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MNIST = os.path.join(ROOT, "sample_models", "mnist.circle")


def _two_fc():
    """x (2,4) -> FC(w1 (3,4), fused RELU) -> h (2,3) -> FC(w2 (2,3)) -> y (2,2); float32."""
    ops = [Operation(0, "FullyConnected", [0, 1], [2], {"activation": "RELU"}, name="fc1"),
           Operation(1, "FullyConnected", [2, 3], [4], name="fc2")]
    return Graph([Operand(0, "x", (2, 4), is_input=True), Operand(1, "w1", (3, 4), is_const=True),
                  Operand(2, "h", (2, 3)), Operand(3, "w2", (2, 3), is_const=True),
                  Operand(4, "y", (2, 2), is_output=True)], ops, [0], [4])


def _conv_relu_pool():
    """x -> Conv2D -> c -> Relu -> r -> MaxPool2D -> p -> Reshape -> f (the output)."""
    g = Graph([Operand(0, "x", (1, 4, 4, 1), is_input=True), Operand(1, "w", (2, 3, 3, 1), is_const=True),
               Operand(2, "c", (1, 4, 4, 2)), Operand(3, "r", (1, 4, 4, 2)), Operand(4, "p", (1, 2, 2, 2)),
               Operand(5, "f", (1, 8)), Operand(6, "shape", (2,), "int32", is_const=True)],
              [Operation(0, "Conv2D", [0, 1], [2], {"padding": "SAME", "stride": (1, 1)}, name="conv"),
               Operation(1, "Relu", [2], [3], name="relu"),
               Operation(2, "MaxPool2D", [3], [4], {"filter": (2, 2), "stride": (2, 2), "padding": "VALID"},
                         name="pool"),
               Operation(3, "Reshape", [4, 6], [5], name="flat")], [0], [5])
    g.verify()
    return g


def _by_name(bl):
    return {b.name: (b.size, b.first, b.last) for b in bl.buffers}


# Steps of _two_fc under SGD + MSE (memplan's order: forward, then per op in reverse calcGradient,
# calcDerivative, applyGradient):
#   0 fc1 forward    reads x, w1          writes h, fc1's pre-activation (SINGA's ReLU keeps its input)
#   1 fc2 forward    reads h, w2          writes y
#   2 loss forward   reads y, label       writes loss
#   3 loss calcDerivative                 writes y:bp (no back-prop for the label)
#   4 fc2 calcGradient reads y:bp, h      writes w2:grad
#   5 fc2 calcDerivative reads y:bp, w2   writes h:bp
#   6 fc2 applyGradient reads w2:grad     (w2:grad freed right after its update)
#   7 fc1 calcGradient reads pre-act, h:bp writes the ReLU's dx (a new tensor: no in-place), w1:grad
#   8 fc1 calcDerivative reads dx, w1     writes x:bp (every SINGA backward computes dx of every input)
#   9 fc1 applyGradient
EXPECTED_TWO_FC = {
    # name: (bytes, first, last)
    "x": (32, 0, 9), "label": (16, 0, 9),          # fed each iteration, held by Python: whole step
    "w1": (48, 0, 9), "w2": (24, 0, 9),            # parameters: never freed
    "h": (24, 0, 4),                               # last reader fc2's calcGradient: not kept for fc1
    "#0:relu_input": (24, 0, 7),                   # the pre-activation, read by the ReLU's backward
    "y": (16, 1, 9), "loss": (4, 2, 9),            # returned to the caller: alive to the end
    "y:bp": (16, 3, 5), "w2:grad": (24, 4, 6), "h:bp": (24, 5, 7),
    "#0:act_back_prop": (24, 7, 8), "w1:grad": (48, 7, 9), "x:bp": (32, 8, 8),
}


def test_singa_lifetimes_of_two_fc_layers():
    bl = PROFILE.build(_two_fc(), TrainConfig(), align=1)
    assert _by_name(bl) == EXPECTED_TWO_FC
    assert [s.kind for s in bl.steps] == ["forward"] * 3 + ["calcDerivative", "calcGradient", "calcDerivative",
                                                             "applyGradient", "calcGradient", "calcDerivative",
                                                             "applyGradient"]
    cats = {b.name: b.category for b in bl.buffers}
    assert cats["#0:relu_input"] == "non-const" and cats["#0:act_back_prop"] == "extra"
    assert not any(n.startswith("label:bp") for n in cats)
    assert [p.planner for p in bl.pools] == ["singa"] and len(bl.pools) == 1


def test_singa_pool_hand_simulated_with_fragmentation():
    """Buffers are allocated at their first step in list order (first step, then creation), freed
    after their last step; first fit over the free blocks, the space above the top as one more block.
      step 0: x@0, w1@32, h@80, w2@104, label@128, relu_input@144      top 168
      step 1: y@168 (184); step 2: loss@184 (188); step 3: y:bp@188 (204)
      step 4: w2:grad@204 (228); h freed after step 4 -> free [80,104)
      step 5: h:bp (24) fits [80,104) exactly -> @80; y:bp freed -> free [188,204)
      step 6: w2:grad freed -> coalesces with [188,204) into [188,228)
      step 7: act_back_prop (24) first fit -> @188, leaves [212,228); w1:grad (48) does not fit, but
              that block touches the top: it grows -> @212, top 260.
              relu_input and h:bp freed -> free [80,104), [144,168)
      step 8: x:bp (32) fits neither 24-byte hole -> @260, top 292
    High-water 292; the lower bound is the peak of live bytes, 260 at step 7 (x 32, w1 48, w2 24,
    label 16, relu_input 24, y 16, loss 4, h:bp 24, act_back_prop 24, w1:grad 48): fragmentation
    292 / 260."""
    a = analyze_graph(_two_fc(), TrainConfig(), profile="singa", profile_options={"align": 1})
    (pool,) = a.pools
    offsets = {b.name: off for b, off in zip(pool.buffers, pool.plan.offsets)}
    assert offsets == {"x": 0, "w1": 32, "h": 80, "w2": 104, "label": 128, "#0:relu_input": 144, "y": 168,
                       "loss": 184, "y:bp": 188, "w2:grad": 204, "h:bp": 80, "#0:act_back_prop": 188,
                       "w1:grad": 212, "x:bp": 260}
    assert (pool.plan.arena, pool.lower_bound, a.lower_bound) == (292, 260, 260)
    assert a.planned_total == 292
    s = a.extras["singa"]
    assert (s["high_water"], s["lower_bound"], s["lost_bytes"]) == (292, 260, 32)
    assert s["fragmentation"] == round(292 / 260, 6)
    # a perfect plan of the same lifetimes reaches the bound: the gap is the online allocator's
    best = analyze_graph(_two_fc(), TrainConfig(), profile="singa", profile_options={"align": 1}, planner="greedy")
    assert best.planned_total == 260


def test_singa_keeps_relu_input_pool_input_and_output_and_shares_reshape():
    bl = PROFILE.build(_conv_relu_pool(), TrainConfig(), align=1)
    b = _by_name(bl)
    tg = bl.training_graph
    steps = {(s.kind, s.label.split()[-1]): [tg.tensors[t].name for t in s.reads] for s in tg.steps}
    # ReLUBackward(dy, x): the Relu's backward reads its input c, not its output r
    assert steps[("calcDerivative", "(relu)")] == ["c", "r:bp"]
    # _Pooling2d keeps (x, y): no argmax buffer
    assert steps[("calcDerivative", "(pool)")] == ["p:bp", "r", "p"]
    assert not any(x.category == "extra" for x in bl.buffers)
    # c lives to the Relu's backward (step 8), r to the pool's (step 7)
    assert b["c"][1:] == (0, 8) and b["r"][1:] == (1, 7)
    # Reshape shares the block: f is p seen with another shape (one buffer, kept as the model output)
    assert "f" not in b and b["p"] == (32, 2, 11)
    assert "f:bp" in b and "p:bp" not in b


def test_singa_adam_state_persistent_gradients_freed_after_update_and_cnmem_rounding():
    bl = PROFILE.build(_two_fc(), TrainConfig(optimizer="adam"))
    b = _by_name(bl)
    end = len(bl.steps) - 1
    states = [x.name for x in bl.buffers if x.category == "opt-variable"]
    assert len(states) == 4  # two per trained weight
    assert all(b[n][1:] == (0, end) for n in states)
    upd = [s.index for s in bl.steps if s.kind == "applyGradient"]
    assert b["w2:grad"][2] == upd[0] and b["w1:grad"][2] == upd[1]
    # cnmem rounds every allocation up to 512 bytes
    assert all(x.size % 512 == 0 and x.size >= x.nbytes for x in bl.buffers)
    assert bl.info["align"] == 512


def test_singa_unknown_option_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown singa profile option"):
        PROFILE.build(_two_fc(), TrainConfig(), inplace=True)


def test_singa_on_mnist_through_the_cli():
    r = CliRunner().invoke(main, ["analyze", MNIST, "-p", "singa", "-b", "4", "-O", "adam", "-f", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    from memplan_cli.schemas import load_schema

    jsonschema.validate(doc, load_schema("analysis"))
    s = doc["figures"]["singa"]
    assert s["high_water"] == doc["totals"]["planned"] == doc["pools"][0]["arena"]
    assert s["lower_bound"] == doc["totals"]["lower_bound"] <= s["high_water"]
    assert s["fragmentation"] == round(s["high_water"] / s["lower_bound"], 6)
    assert doc["pools"][0]["planner"] == "singa"
    t = CliRunner().invoke(main, ["analyze", MNIST, "-p", "singa", "-b", "4", "-O", "adam", "--color", "never"])
    prose = " ".join(t.stdout.split())  # the summary wraps at 80 columns
    assert "singa pool (online first fit, no plan): high-water" in prose
    assert f"fragmentation {s['fragmentation']:.4f}" in prose
