"""onert's training IR and TensorPlanner replay on tiny hand-built graphs (no runtime needed)."""
import pytest

from memplan_cli.config import TrainConfig
from memplan_cli.errors import MemplanError
from memplan_cli.profiles.onert import PROFILE, predict_alloc_lines, tensorplan
from memplan_cli.profiles.onert.replay import bump, firstfit, wic
from memplan_cli.profiles.onert.trainir import build_train_ir
from devtools import zoo
from devtools.modelgen import ModelBuilder, to_graph


def ir_of(mb, batch=1, trainable=None):
    g = to_graph(mb, batch)
    return g, build_train_ir(g, set(range(len(g.operations))) if trainable is None else trainable)


def test_loss_label_and_constant_copies():
    m = ModelBuilder()
    x = m.input([1, 4])
    w = m.const([4])
    y = m.mul(x, w)
    y = m.add(y, w)  # the same constant used twice: onert duplicates it
    m.output(m.fully_connected(y, 3))
    g, ir = ir_of(m, batch=5)
    consts = [o for o in ir.operands if o.is_const]
    assert len(consts) == sum(o.is_const for o in g.operands) + 1
    loss = ir.ops[-1]
    assert loss.type == "Loss" and ir.operands[ir.y_true].shape == (5, 3)
    assert ir.operands[ir.loss_out].nbytes == 20  # one float per sample


def test_add_keeps_both_inputs_until_its_backward():
    m = zoo.residual()
    g, ir = ir_of(m)
    add = next(op for op in ir.ops if op.type == "Add")
    for i in add.inputs:
        assert (add.index, False) in ir.uses[(i, True)]


def test_trainable_cut_leaves_prefix_without_backward():
    m = zoo.tiny_cnn()  # conv, maxpool, reshape, fc, softmax
    _, ir = ir_of(m, trainable={4})  # softmax only: no weighted op after the cut
    assert ir.backward_order == []
    _, ir = ir_of(m, trainable={3, 4})
    assert [ir.ops[k].type for k in ir.backward_order] == ["Loss", "Softmax", "FullyConnected"]
    bp, grad = tensorplan.registered_backward(ir)
    # the FC's input (the boundary activation) still gets a back-prop, released at the end
    assert ir.ops[3].inputs[0] in bp and len(grad) == 2


def test_branching_operand_gets_disposables():
    _, ir = ir_of(zoo.two_branches())
    pairs = tensorplan.disposables(ir)
    assert len(pairs) == 2 and len({o for _, o in pairs}) == 1


def test_events_are_distinct_and_claims_precede_releases():
    _, ir = ir_of(zoo.residual(), batch=3)
    for plan in (tensorplan.plan_nonconst, tensorplan.plan_backprop, tensorplan.plan_gradient,
                 tensorplan.plan_disposable, tensorplan.plan_trainable):
        evs = plan(ir)
        stamps = [e.first for e in evs] + [e.last for e in evs]
        assert len(stamps) == len(set(stamps))
        assert all(e.first < e.last for e in evs)
        assert all(e.size % 16 == 0 and e.size >= e.nbytes for e in evs)


def test_planners_semantics():
    # a released block is reused by a later claim; WIC places big first, ties in claim order
    sizes, firsts, lasts = [32, 16, 32], [0, 1, 3], [2, 4, 5]
    assert bump(sizes, firsts, lasts) == ([0, 32, 48], 80)
    assert firstfit(sizes, firsts, lasts) == ([0, 32, 0], 48)
    assert wic(sizes, firsts, lasts) == ([0, 32, 0], 48)
    # WIC is offline: a small early block can end up above a later big one
    assert wic([16, 64], [0, 1], [2, 3])[0] == [64, 0]


def test_unsupported_op_and_activation():
    m = ModelBuilder()
    x = m.input([1, 4, 4, 2])
    y = m.concat([m.conv2d(x, 2, 1), m.conv2d(x, 2, 1)])
    m.output(m.fully_connected(m.reshape(y, [-1, 64]), 3))
    with pytest.raises(MemplanError, match=r"onert cannot train op #2 Concat"):
        PROFILE.build(to_graph(m), TrainConfig())
    m = ModelBuilder()
    x = m.input([1, 4])
    m.output(m.fully_connected(m.fully_connected(x, 3, activation="TANH"), 2))
    with pytest.raises(MemplanError, match="fused activation TANH"):
        PROFILE.build(to_graph(m), TrainConfig(trainable=1))


def test_depthwise_buffers_follow_threads_and_simd_width():
    g = to_graph(zoo.depthwise(), 2)
    cfg = TrainConfig(batch_size=2)
    a = predict_alloc_lines(g, cfg, threads=2, simd_width=4)
    b = predict_alloc_lines(g, cfg, threads=7, simd_width=16)
    # first depthwise conv: C_out 3, 3x3, fused RELU6 -> act, [T,P], [B,9,P], [T,9,P] floats
    assert a[6:10] == [2 * 8 * 8 * 3 * 4, 3 * 4 * 4, 2 * 9 * 4 * 4, 3 * 9 * 4 * 4]
    assert b[6:10] == [2 * 8 * 8 * 3 * 4, 8 * 16 * 4, 2 * 9 * 16 * 4, 8 * 9 * 16 * 4]
    assert a[:6] == b[:6]


def test_opt_variable_is_count_times_trainable():
    g = to_graph(zoo.elementwise(), 2)
    for opt, k in (("sgd", 0), ("adam", 2)):
        lines = predict_alloc_lines(g, TrainConfig(optimizer=opt, trainable=1))
        assert lines[2] == k * lines[1]


def test_figures_and_32bit_limit():
    from types import SimpleNamespace

    from memplan_cli.planners import get_planner

    g = to_graph(zoo.tiny_cnn(), 2)
    bl = PROFILE.build(g, TrainConfig(optimizer="adam"), planner="bump")
    pools = []
    for pool in bl.pools:
        bufs = bl.in_pool(pool.name)
        plan = get_planner(pool.planner)([b.size for b in bufs], [b.first for b in bufs], [b.last for b in bufs])
        pools.append(SimpleNamespace(pool=pool, plan=plan))
    fig = PROFILE.figures(SimpleNamespace(pools=pools))
    assert fig["alloc_lines"] == predict_alloc_lines(g, TrainConfig(optimizer="adam"), planner="bump")
    one = fig["one_style"]
    assert list(one) == ["non-const", "trainable", "back-prop", "gradient", "opt variable", "disposable",
                         "extra tensors"]
    assert one["extra tensors"] == sum(fig["alloc_lines"][6:])
    big = SimpleNamespace(pool=pools[0].pool, plan=SimpleNamespace(arena=2**32))
    with pytest.raises(MemplanError, match="onert cannot hold this"):
        PROFILE.figures(SimpleNamespace(pools=[big] + pools[1:]))


def test_bad_planner_name():
    with pytest.raises(MemplanError, match="no planner"):
        PROFILE.build(to_graph(zoo.tiny_cnn()), TrainConfig(), planner="greedy")
