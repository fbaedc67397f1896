"""memplan's profile: each saving rule, switched off, changes the buffer list the documented way."""
import pytest

from memplan_cli.check.schedule import check_schedule
from memplan_cli.config import TrainConfig
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.policy import Policy
from memplan_cli.profiles.memplan import PROFILE, peak_figures
from tests.passes.graphs import chain, conv_relu_fc, residual


def _build(g, cfg=None, **opts):
    bl = PROFILE.build(g, cfg or TrainConfig(), **opts)
    check_schedule(bl.training_graph, bl)
    return bl, bl.training_graph


def _names(bl):
    return {b.name: b for b in bl.buffers}


def _step(tg, kind, op):
    return next(s for s in tg.steps if s.kind == kind and s.op == op)


def test_inplace_activation_forward_and_backward():
    g = chain("Relu")  # FC -> t0 -> Relu -> t1: t0 is dead after the ReLU's forward
    bl, tg = _build(g)
    assert "t1" not in _names(bl) and "t0:bp" not in _names(bl)  # t1 over t0, dt0 over dt1
    off, _ = _build(g, inplace=False)
    assert {"t1", "t0", "t0:bp", "t1:bp"} <= set(_names(off))


def test_naive_is_the_same_with_in_place_on_or_off():
    # naive counts every tensor: what running in place saves shows in folded, not in naive
    for g in (chain("Relu"), conv_relu_fc(), residual()):
        on, _ = _build(g, TrainConfig(optimizer="adam"))
        off, _ = _build(g, TrainConfig(optimizer="adam"), inplace=False)
        n_on, n_off = on.naive_by_category(), off.naive_by_category()
        # off, a fused activation's backward needs an extra tensor the in-place form does without
        assert n_on["extra"] <= n_off["extra"]
        assert {c: v for c, v in n_on.items() if c != "extra"} == {c: v for c, v in n_off.items() if c != "extra"}
        assert on.folded_total() > off.folded_total() >= 0
        assert on.folded_total() == on.naive_total() - sum(b.size for b in on.buffers)


def test_fused_activation_backward_in_place_or_into_an_extra():
    g = conv_relu_fc()
    _, tg = _build(g)
    assert _step(tg, "calcGradient", 0).writes[0] == tg.bp[3]  # dY * relu6'(Y) over dY
    off, tg2 = _build(g, inplace=False)
    act = _names(off)["#0:act_back_prop"]
    assert (act.category, act.size) == ("extra", 2048)
    assert act.first == act.last == _step(tg2, "calcGradient", 0).index  # only where it is used


def test_reshape_is_a_view_or_a_copy():
    on, tg = _build(conv_relu_fc())
    assert "f" not in _names(on)
    off, _ = _build(conv_relu_fc(), alias_reshape=False)
    assert _names(off)["f"].size == 2048 and _names(off)["r:bp"].size == 2048


def test_add_keeps_nothing_for_backward():
    _, tg = _build(residual())
    assert [tg.tensors[t].name for t in _step(tg, "calcDerivative", 2).reads] == ["c:bp"]
    _, tg2 = _build(residual(), add_keeps_nothing=False)
    assert [tg2.tensors[t].name for t in _step(tg2, "calcDerivative", 2).reads] == ["c:bp", "a", "b"]


def test_no_back_prop_for_graph_inputs_and_the_label():
    _, tg = _build(conv_relu_fc())
    bp_of = {tg.tensors[t].operand for t in tg.bp.values()}
    assert 0 not in bp_of and tg.label not in bp_of
    _, tg2 = _build(conv_relu_fc(), input_backprop=True)
    bp_of2 = {tg2.tensors[t].operand for t in tg2.bp.values()}
    assert {0, tg2.label} <= bp_of2


def test_fc_transposes_only_when_asked():
    on, _ = _build(conv_relu_fc())
    assert not [b for b in on.buffers if b.category == "extra" and "^T" in b.name]
    off, tg = _build(conv_relu_fc(), transpose_extras=True)
    ex = {b.name: b.size for b in off.buffers if "^T" in b.name}
    # FC: W^T (10x256 floats), X^T (2x256), dY^T (2x10 -> 80 B); Conv: only dW^T (x needs no back-prop)
    assert ex == {"#3:W^T": 10240, "#3:X^T": 2048, "#3:dY^T": 80, "#0:dW^T": 432}


def test_optimizer_state_only_for_trained_float_weights():
    cfg = TrainConfig(optimizer="adam", trainable=2)  # Reshape and FC: only the FC's weights train
    bl, _ = _build(conv_relu_fc(), cfg)
    assert sorted(b.name for b in bl.buffers if b.category == "opt-variable") == ["b1:m", "b1:v", "w1:m", "w1:v"]
    off, _ = _build(conv_relu_fc(), cfg, opt_state_all_constants=True)
    names = {b.name for b in off.buffers if b.category == "opt-variable"}
    assert {"w0:m", "shape:v"} <= names and len(names) == 10
    momentum, _ = _build(conv_relu_fc(), TrainConfig(optimizer="momentum"))
    assert sum(1 for b in momentum.buffers if b.category == "opt-variable") == 4


def test_first_contribution_accumulates_in_place():
    _, tg = _build(residual())
    assert [t.name for t in tg.tensors if t.category == "disposable"] == ["a:bp@1"]
    s = _step(tg, "calcDerivative", 1)
    assert s.accumulate == [(next(t.id for t in tg.tensors if t.name == "a:bp@1"), tg.bp[2], False)]
    _, tg2 = _build(residual(), accumulate_in_place=False)
    assert sorted(t.name for t in tg2.tensors if t.category == "disposable") == ["a:bp@1", "a:bp@2"]
    assert _step(tg2, "calcDerivative", 2).accumulate[0][2] is True  # the first one initialises


SAME = {"padding": "SAME", "stride": (1, 1), "dilation": (1, 1)}


def _conv_pool(act):
    ops = [Operand(0, "x", (2, 4, 4, 1), is_input=True), Operand(1, "w", (2, 1, 1, 1), is_const=True),
           Operand(2, "c", (2, 4, 4, 2)), Operand(3, "p", (2, 2, 2, 2)),
           Operand(4, "w2", (2, 1, 1, 2), is_const=True), Operand(5, "y", (2, 2, 2, 2))]
    g = Graph(ops, [Operation(0, "Conv2D", [0, 1, -1], [2], {"activation": act, **SAME}),
                    Operation(1, "MaxPool2D", [2], [3], {"filter": (2, 2), "stride": (2, 2), "padding": "VALID",
                                                         "activation": "NONE"}),
                    Operation(2, "Conv2D", [3, 4, -1], [5], {"activation": "NONE", **SAME})], [0], [5])
    g.verify()
    return g


def test_maxpool_recomputes_from_a_kept_input_else_keeps_a_window_index():
    _, tg = _build(_conv_pool("TANH"))  # Tanh keeps its float output: the pool reads it for free
    assert not tg.extras[1] and tg.fwd[2] in _step(tg, "calcDerivative", 1).reads
    bl, tg = _build(_conv_pool("RELU"))  # a ReLU output becomes a mask: the pool keeps a 1-byte index
    idx = _names(bl)["#1:window_index"]
    assert (idx.size, idx.nbytes) == (16, 16) and idx.first == 1  # 16 outputs, uint8
    assert "#0:relu_mask" in _names(bl)
    off, _ = _build(_conv_pool("RELU"), maxpool_recompute=False)
    assert _names(off)["#1:arg_max"].nbytes == 64  # int32 per output


def test_relu_mask_replaces_an_output_only_its_derivative_reads():
    on, tg = _build(conv_relu_fc())
    mask = _names(on)["#0:relu_mask"]
    assert (mask.nbytes, mask.first, mask.last) == (64, 0, _step(tg, "calcGradient", 0).index)
    off, tg2 = _build(conv_relu_fc(), relu_mask=False)
    assert "#0:relu_mask" not in _names(off)
    assert tg2.fwd[3] in _step(tg2, "calcGradient", 0).reads


def test_gradients_die_at_their_update_unless_updates_are_deferred():
    on, tg = _build(conv_relu_fc())
    g = _names(on)["w1:grad"]
    assert (g.first, g.last) == (_step(tg, "calcGradient", 3).index, _step(tg, "applyGradient", 3).index)
    off, tg2 = _build(conv_relu_fc(), apply_immediately=False)
    end = len(tg2.steps) - 1
    assert _names(off)["w1:grad"].last > _names(off)["w0:grad"].first
    assert [s.kind for s in tg2.steps[-2:]] == ["applyGradient", "applyGradient"] and tg2.steps[end].op == 0


def test_one_arena_or_one_pool_per_category():
    bl, _ = _build(conv_relu_fc(), TrainConfig(optimizer="adam"))
    assert [p.name for p in bl.pools] == ["arena"] and {b.pool for b in bl.buffers} == {"arena"}
    split, _ = _build(conv_relu_fc(), TrainConfig(optimizer="adam"), one_arena=False)
    assert {p.name for p in split.pools} == {b.category for b in split.buffers}


def test_every_rule_off_costs_more_on_every_category_it_touches():
    base = {k: getattr(Policy.baseline(), k) for k in Policy.names()}
    on, _ = _build(conv_relu_fc(), TrainConfig(optimizer="adam"))
    off, _ = _build(conv_relu_fc(), TrainConfig(optimizer="adam"), **base)
    assert peak_figures(off)["peak_live_bytes"] > peak_figures(on)["peak_live_bytes"]
    assert off.naive_total() > on.naive_total()


def test_figures_name_the_peak_and_what_it_is_made_of():
    bl, tg = _build(conv_relu_fc(), TrainConfig(optimizer="adam"))
    f = peak_figures(bl)
    live = [sum(b.size for b in bl.buffers if b.first <= s <= b.last) for s in range(len(bl.steps))]
    assert f["peak_live_bytes"] == max(live) and f["peak_step"] == live.index(max(live))
    assert sum(f["peak_by_category"].values()) == f["peak_live_bytes"]
    assert f["peak_op"] == tg.steps[f["peak_step"]].label


@pytest.mark.parametrize("bad", [{"inplce": True}])
def test_unknown_option_is_a_config_error(bad):
    from memplan_cli.errors import ConfigError

    with pytest.raises(ConfigError):
        PROFILE.build(conv_relu_fc(), TrainConfig(), **bad)


@pytest.mark.parametrize("graph", [conv_relu_fc, residual, lambda: _conv_pool("RELU"), lambda: _conv_pool("TANH")])
@pytest.mark.parametrize("rules", ["memplan", "baseline"])
def test_planned_step_runs_inside_the_arena_like_in_separate_buffers(graph, rules):
    execute = pytest.importorskip("memplan_cli.execute.executor").execute
    from memplan_cli.execute.layout import layout_from_offsets
    from memplan_cli.planners import get_planner

    opts = {} if rules == "memplan" else {k: getattr(Policy.baseline(), k) for k in Policy.names()}
    for opt in ("sgd", "adam"):
        bl, tg = _build(graph(), TrainConfig(optimizer=opt), **opts)
        b = bl.buffers
        plan = get_planner(bl.pools[0].planner)([x.size for x in b], [x.first for x in b], [x.last for x in b])
        offsets = {x.name: o for x, o in zip(b, plan.offsets)}
        r = execute(tg, layout_from_offsets(tg, bl, offsets, {"arena": plan.arena}), optimizer=opt)
        assert r.passed, r.message
        assert r.steps_run == len(tg.steps)
