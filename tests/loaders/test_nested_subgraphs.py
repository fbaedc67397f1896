"""If / Loop bodies nested in bodies: the loader's work is linear in the file, and past a budget of
nodes inside subgraphs memplan refuses with one line (issue 28; benchmarks/scale_bench.py --only nested)."""
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.loaders import onnx_strip
from memplan_cli.loaders.onnx_strip import strip_model
from tests.loaders import onnxmodels as om


def _strip_counts(data: bytes, monkeypatch) -> tuple[int, int]:
    """(fields() walks, input bytes sliced into the output) while stripping `data`."""
    walks, sliced = [0], [0]
    fields, flush = onnx_strip.fields, onnx_strip._Out._flush

    def counting_fields(buf, start, end):
        walks[0] += 1
        return fields(buf, start, end)

    def counting_flush(self):
        sliced[0] += self.run_end - self.run_start
        flush(self)

    monkeypatch.setattr(onnx_strip, "fields", counting_fields)
    monkeypatch.setattr(onnx_strip._Out, "_flush", counting_flush)
    out, has_graph = strip_model(data, len(data))
    monkeypatch.undo()
    assert has_graph and out == data  # nothing to strip here: the same bytes back
    return walks[0], sliced[0]


def test_stripping_nested_branches_touches_each_byte_once(monkeypatch):
    # every If holds two Ifs: the file doubles per level. Building each subgraph's bytes and copying
    # them into its parent copied a byte once per level it is nested in; now each input byte is
    # sliced once and each message walked a fixed number of times, whatever the depth
    per_node = []
    for depth in (4, 7, 10):
        data = om.nested_if(depth).SerializeToString()
        walks, sliced = _strip_counts(data, monkeypatch)
        assert sliced <= len(data)
        per_node.append(walks / (2 ** (depth + 1) - 1))
    assert max(per_node) <= 6 and max(per_node) - min(per_node) < 0.1


def test_moderately_nested_model_analyses(tmp_path):
    path = om.save(tmp_path, "nested.onnx", om.nested_if(8))  # 510 nodes inside subgraphs
    r = CliRunner().invoke(main, ["analyze", path, "-f", "json"])
    assert r.exit_code == 0, r.output


def test_subgraphs_over_the_budget_refused_in_one_line(tmp_path, monkeypatch):
    path = om.save(tmp_path, "nested.onnx", om.nested_if(6))  # 126 nodes inside subgraphs
    monkeypatch.setattr(onnx_strip, "MAX_SUBGRAPH_NODES", 100)
    r = CliRunner().invoke(main, ["analyze", path])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "nested.onnx" in lines[0] and "more than 100 nodes" in lines[0]
    monkeypatch.setattr(onnx_strip, "MAX_SUBGRAPH_NODES", 126)
    assert CliRunner().invoke(main, ["analyze", path, "-f", "json"]).exit_code == 0
