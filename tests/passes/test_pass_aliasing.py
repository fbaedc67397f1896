"""aliasing on its own: views and in-place results share their input's memory."""
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import conv_relu_fc, up_to


def _groups(tg):
    return sorted(sorted(tg.tensors[t].name for t in ts) for ts in tg.groups().values() if len(ts) > 1)


def test_reshape_view_and_in_place_relu_and_back_props():
    tg, p = up_to("aliasing", conv_relu_fc())
    assert run_checked(p, tg)
    groups = _groups(tg)
    assert any({"c0", "f", "r"} <= set(g) for g in groups)  # Relu in place over c0, Reshape a view of r
    assert ["c0:bp", "f:bp", "r:bp"] in groups
    assert all(tg.aliases[t] not in tg.aliases for t in tg.aliases)  # every alias points at its root


def test_without_views_or_in_place_nothing_is_shared():
    tg, p = up_to("aliasing", conv_relu_fc(), policy=Policy(inplace=False, alias_reshape=False))
    run_checked(p, tg)
    assert not any(g for g in _groups(tg) if "f" in g)
