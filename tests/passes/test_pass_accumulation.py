"""accumulation on its own: back-prop contributions at a branch point."""
from memplan_cli.passes.infra import run_checked
from memplan_cli.passes.policy import Policy
from tests.passes.graphs import residual, up_to


def _disposables(tg):
    return sorted(t.name for t in tg.tensors if t.category == "disposable")


def test_the_first_contributor_writes_the_back_prop_itself():
    tg, p = up_to("accumulation", residual())
    assert run_checked(p, tg)
    # a feeds FC #1 and the Add #2; backward visits the Add first: it writes a:bp, FC #1 a disposable
    assert _disposables(tg) == ["a:bp@1"]
    (src, dst, first), = tg.accumulate[1]
    assert tg.tensors[src].name == "a:bp@1" and tg.tensors[dst].name == "a:bp" and not first
    assert tg.contributions[(2, 2)] == tg.bp[2] and tg.accumulate_grad == {}


def test_without_in_place_accumulation_every_contribution_is_disposable():
    tg, p = up_to("accumulation", residual(), policy=Policy(accumulate_in_place=False))
    run_checked(p, tg)
    assert _disposables(tg) == ["a:bp@1", "a:bp@2"]
    assert [first for _, _, first in tg.accumulate[2]] == [True]
