"""Mapping the onert profile's buffers onto training-graph tensors, and its event lifetimes onto steps."""
from memplan_cli.buffers import Buffer
from memplan_cli.config import TrainConfig
from memplan_cli.execute.layout import layout_from_pools
from memplan_cli.execute.memory import Layout, Placement
from memplan_cli.verification.onert_map import locator, onert_training_graph, role_of, step_intervals
from tests.execute.graphs import conv_net


def _b(name, pool, owner=""):
    return Buffer(name, "extra" if pool.startswith("onert:kernel") else "non-const", 16, 0, 1, owner, pool)


def test_each_onert_buffer_finds_its_tensor():
    tg = onert_training_graph(conv_net(), TrainConfig(optimizer="adam", loss="cce"))
    locate = locator(tg)
    names = {t.name for t in tg.tensors}

    def found(buffer):
        t = locate(buffer)
        return None if t is None else tg.tensors[t].name

    cases = [(_b("x", "onert:non-const"), "x"), (_b("y_true'", "onert:non-const"), "label"),
             (_b("w0", "onert:trainable"), "w0"), (_b("w0 var0", "onert:opt-variable"), "w0:m"),
             (_b("w0 var1", "onert:opt-variable"), "w0:v"), (_b("dc", "onert:back-prop"), "c:bp"),
             (_b("dy_true'", "onert:back-prop"), "label:bp"), (_b("grad w0", "onert:gradient"), "w0:grad"),
             (_b("#0 Conv2D W^T", "onert:kernel:0", "#0 Conv2D"), "#0:W^T"),
             (_b("#2 MaxPool2D argmax", "onert:kernel:4", "#2 MaxPool2D"), "#2:arg_max"),
             (_b("#0 Conv2D act dY", "onert:kernel:0", "#0 Conv2D"), "#0:act_back_prop")]
    for buffer, want in cases:
        assert want in names and found(buffer) == want, buffer.name
    assert found(_b("#0 Conv2D conv dY", "onert:kernel:1", "#0 Conv2D")) is None
    assert found(_b("w0_copy", "onert:trainable")) is None
    assert role_of(_b("dx1@3", "onert:disposable")) == ("x1", "bp@", 3)


class _Pool:
    def __init__(self, name):
        self.name, self.category, self.planner = name, "non-const", "wic"


class _Plan:
    def __init__(self, offsets, arena):
        self.offsets, self.arena, self.planner = offsets, arena, "wic"


class _PP:
    def __init__(self, pool, buffers, offsets, arena):
        self.pool, self.buffers, self.plan = _Pool(pool), buffers, _Plan(offsets, arena)


def test_a_layout_from_onert_buffers_gets_step_intervals():
    tg = onert_training_graph(conv_net(), TrainConfig(optimizer="adam", loss="cce"))
    names = {t.name for t in tg.tensors}
    assert {"#0:W^T", "#0:dW^T", "#0:act_back_prop", "#2:arg_max", "x:bp", "label:bp", "w0:m", "shape:v"} <= names
    bufs = [Buffer("c", "non-const", 1152, 5, 40, "", "onert:non-const"),
            Buffer("#0 Conv2D W^T", "extra", 288, 0, 0, "#0 Conv2D", "onert:kernel:0"),
            Buffer("#0 Conv2D conv dY", "extra", 1152, 0, 0, "#0 Conv2D", "onert:kernel:1")]
    lay = layout_from_pools(tg, [_PP("onert:non-const", bufs[:1], [0], 1152), _PP("onert:kernel:0", bufs[1:2], [0], 288),
                                 _PP("onert:kernel:1", bufs[2:], [0], 1152)], "onert", locate=locator(tg))
    assert lay.unmapped == ["#0 Conv2D conv dY"]
    lay = step_intervals(tg, lay, None)
    glt = tg.group_lifetimes()
    c = next(t.id for t in tg.tensors if t.name == "c")
    assert (lay.placements[tg.root(c)].first, lay.placements[tg.root(c)].last) == glt[tg.root(c)]
    # with the profile's event -> op record the intervals come from onert's own claim / release points
    fwd0 = next(s.index for s in tg.steps if s.kind == "forward" and s.op == 0)
    last_b1 = max(s.index for s in tg.steps if s.kind != "forward" and s.op == 1)
    lay2 = step_intervals(tg, Layout(dict(lay.placements), lay.arenas, "onert"),
                          {"c": ((0, "forward"), (1, "backward"))})
    p = lay2.placements[tg.root(c)]
    assert (p.first, p.last) == (fwd0, last_b1)
    assert isinstance(p, Placement)
