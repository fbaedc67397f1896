"""The pass infrastructure: declared contracts, checked; the pipeline's stages; the remat problem
running the pipeline's own memory stage on a fork that leaves its base step alone."""
import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.config import TrainConfig
from memplan_cli.loaders import load_model
from memplan_cli.passes.aliasing import Aliasing
from memplan_cli.passes.infra import CHECK_ENV, Pass, PassContractError, Pipeline, run_checked
from memplan_cli.passes.pipeline import MEMORY, STAGES, build_training_graph, memplan_pipeline
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.rules import default_rules
from memplan_cli.passes.training_graph import TrainingGraph
from memplan_cli.remat.problem import RematProblem
from tests.passes.graphs import conv_relu_fc, residual, up_to

MNIST = "sample_models/mnist.onnx"


class ReadsUndeclared(Pass):
    name = "reads-undeclared"
    reads = frozenset({"graph"})

    def run(self, tg):
        return bool(tg.fwd)


class ChangesItsReads(Pass):
    name = "changes-its-reads"
    reads = frozenset({"trainable_ops"})

    def run(self, tg):
        tg.trainable_ops.add(99)
        return True


class Fails(Pass):
    name = "fails"

    def run(self, tg):
        raise ValueError("broken")


def test_a_pass_touching_a_field_it_does_not_declare_is_stopped_by_name():
    with pytest.raises(PassContractError, match="reads-undeclared touches the field 'fwd'"):
        run_checked(ReadsUndeclared(), TrainingGraph(residual(), TrainConfig()), full=False)


def test_a_pass_changing_a_field_it_only_reads_is_caught():
    with pytest.raises(PassContractError, match=r"changes-its-reads changes fields it declares read-only: \['trainable_ops'\]"):
        run_checked(ChangesItsReads(), TrainingGraph(residual(), TrainConfig()))


def test_after_the_check_the_graph_is_itself_again():
    tg = TrainingGraph(residual(), TrainConfig())
    with pytest.raises(PassContractError):
        run_checked(ReadsUndeclared(), tg)
    assert type(tg) is TrainingGraph and tg.fwd == {}


def test_a_pass_declaring_a_field_that_does_not_exist_is_refused_at_definition():
    with pytest.raises(TypeError, match="no_such_field"):
        type("Bad", (Pass,), {"name": "bad", "reads": frozenset({"no_such_field"})})


def test_a_failing_pass_keeps_its_error_and_is_named_in_a_note():
    pipe = Pipeline([("one", [Fails()])])
    with pytest.raises(ValueError, match="broken") as e:
        pipe.run(TrainingGraph(residual(), TrainConfig()))
    assert "in memplan pass 'fails' (stage 'one')" in e.value.__notes__


def test_the_pipeline_runs_the_stages_asked_for_in_order():
    pipe = memplan_pipeline(Policy(), default_rules(), (), TrainConfig())
    assert [s.name for s in pipe.stages] == list(STAGES)
    tg = TrainingGraph(residual(), TrainConfig())
    ran = pipe.run(tg, stages=STAGES[:2])
    assert [n for n, _ in ran] == [p.name for s in pipe.stages[:2] for p in s.passes] and tg.aliases == {}
    with pytest.raises(KeyError, match="no stage 'nope'"):
        pipe.stage("nope")


def test_every_pass_is_named_once():
    names = [p.name for p in memplan_pipeline(Policy(), default_rules(), (), TrainConfig()).passes]
    assert len(names) == len(set(names)) == 14


@pytest.mark.parametrize("config,policy", [
    (TrainConfig(batch_size=2, optimizer="adam"), Policy()),
    (TrainConfig(batch_size=2, optimizer="momentum", trainable=3), Policy.baseline()),
    (TrainConfig(batch_size=2, precision="bf16-mixed"), Policy()),
    (TrainConfig(batch_size=2, precision="16-true", train=("biases",)), Policy()),
])
def test_every_contract_holds_on_a_real_model(monkeypatch, config, policy):
    monkeypatch.setenv(CHECK_ENV, "full")
    tg = build_training_graph(load_model(MNIST), config, policy=policy, remat=[1])
    assert [n for n, _ in tg.ran][-4:] == [p.name for p in memplan_pipeline(policy, {}, (), config).stage(MEMORY).passes]


def test_every_contract_holds_with_lora_on_a_real_transformer(monkeypatch):
    monkeypatch.setenv(CHECK_ENV, "full")
    tg = build_training_graph(load_model("tests/corpus/gpt2_tiny_dynamo.onnx"),
                              TrainConfig(batch_size=2, lora_rank=2, lora_targets=("MatMul",)))
    assert tg.lora.adapters


def test_the_remat_problem_runs_the_pipelines_own_passes():
    cfg = TrainConfig(batch_size=2)
    pr = RematProblem(load_model(MNIST), cfg)
    plan = pr.build([pr.candidates[0]])
    assert [n for n, _ in plan.ran] == [p.name for p in memplan_pipeline(Policy(), {}, (), cfg).passes]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "16-mixed", "bf16-true"])
def test_a_plan_leaves_the_problems_base_step_as_it_was(precision):
    # CastCopies used to append to the base step's own lists: the next plan then read tensor ids
    # that only the first plan's fork had (`analyze --precision bf16-mixed --budget` ended in an
    # internal error)
    pr = RematProblem(load_model(MNIST), TrainConfig(batch_size=2, precision=precision))
    before = repr(pr._base)
    first = pr.build([pr.candidates[0]])
    pr.build([pr.candidates[-1]])
    again = pr.build([pr.candidates[0]])
    assert repr(pr._base) == before
    assert len(first.tensors) == len(again.tensors) and first.steps == again.steps


def test_up_to_stops_before_the_named_pass():
    tg, p = up_to("accumulation", conv_relu_fc())
    assert p.name == "accumulation" and tg.tensors and tg.steps == [] and tg.accumulate == {}


def test_an_internal_error_in_a_pass_names_the_pass_on_its_one_line(monkeypatch):
    def broken(self, tg):
        raise KeyError("x")

    monkeypatch.setattr(Aliasing, "run", broken)
    monkeypatch.delenv("MEMPLAN_DEBUG", raising=False)
    r = CliRunner().invoke(main, ["analyze", MNIST, "-q"], catch_exceptions=False)
    assert r.exit_code == 70
    assert "internal error: KeyError: 'x'; in memplan pass 'aliasing' (stage 'memory') (a bug in memplan" in r.output
