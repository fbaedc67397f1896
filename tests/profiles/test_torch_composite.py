"""`--profile torch` on the language part of a composite (multimodal) model, on tiny hand-built ONNX
graphs with the module paths torch.onnx writes (no torch needed): a transformers composite trained on
token ids alone never enters its vision or audio towers, so its exports hold only the part transformers
names `language_model` (or `model.text_model`) and a head; eager holds the other parts' parameters all
step. The TorchScript file keeps no trace of them, so the report says the composite's other parts are
not counted; a dynamo file's graph signature lists them, so its unread line names them. A plain model
(or a text tower whose `text_model` sits at the top) gets no such line."""
import json

import jsonschema
import pytest
from click.testing import CliRunner
from onnx import helper

from memplan_cli.cli import main
from memplan_cli.schemas import load_schema
from tests.profiles.test_torch_export import _save, _signature, _w
from tests.profiles.test_torch_export import _torch as _torch_and_analysis


def _file(tmp_path, name, body, head="m.lm_head", listed=None):
    """x (2, 16) -> Linear `{body}.l1` -> Linear `{head}` -> y: as the TorchScript training export writes
    it (initializers under the module's paths); `listed`: a dynamo file's graph signature, listing
    these parameters beside the two read."""
    nodes = [helper.make_node("Gemm", ["x", f"{body}.l1.weight", f"{body}.l1.bias"], ["h"], transB=1, name="l1"),
             helper.make_node("Gemm", ["h", f"{head}.weight"], ["y"], transB=1, name="head")]
    inits = [(f"{body}.l1.weight", _w(16, 16)), (f"{body}.l1.bias", _w(16)), (f"{head}.weight", _w(8, 16))]
    sig = None if listed is None else _signature([k for k, _ in inits] + list(listed))
    return _save(tmp_path, name, nodes, inits, [2, 16], [2, 8], sig=sig)


def _torch(path):
    return _torch_and_analysis(path)[0]


def _header(path):
    r = CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-O", "adam"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    return r.output.split("\n┏")[0]


@pytest.mark.parametrize("body, part", [("m.model.language_model", "m.model.language_model"),
                                        ("m.model.language_model.model", "m.model.language_model"),
                                        ("model.text_model", "model.text_model"),
                                        ("language_model", "language_model")])
def test_the_language_part_of_a_composite_says_its_other_parts_are_not_counted(tmp_path, body, part):
    # got_ocr2 / moss_transcribe_diarize (`model.language_model` beside `lm_head`), ModernVBERT /
    # UltraVBERT (`model.text_model` beside `classifier`), an older composite holding its language
    # model (its head inside it) at the top
    head = part + ".lm_head" if body == "language_model" else "m.lm_head"
    path = _file(tmp_path, "ts", body, head)
    t = _torch(path)
    comp = t["coverage"]["composite"]
    assert comp["language_part"] == part and "other_parts" not in comp
    assert comp["note"] == f"not counted: the composite model's parts beside {part}; no size"
    # the figure is the file's: nothing is guessed for the parts it does not hold
    plain = _torch(_file(tmp_path, "plain", "m.model.decoder"))
    assert t["peak"] == plain["peak"]
    lines = _header(path).splitlines()
    assert comp["note"] in lines and all(len(line) <= 80 for line in lines)
    from memplan_cli.profiles.torch import coverage_line

    assert comp["note"] in coverage_line(t["coverage"])
    doc = json.loads(CliRunner().invoke(main, ["analyze", path, "-p", "torch", "-l", "cce", "-f", "json"]).output)
    jsonschema.validate(doc, load_schema("analysis"))
    assert doc["figures"]["torch"]["coverage"]["composite"] == comp


@pytest.mark.parametrize("body", ["m.model", "m.model.decoder", "m.text_model", "text_model", "m.model.text_models",
                                  "m.model.language_model_proj"])
def test_a_plain_language_model_gets_no_composite_line(tmp_path, body):
    # a causal LM (`model.layers`), a decoder of an encoder-decoder, and a text tower whose `text_model`
    # is its top module (CLIPTextModelWithProjection, OwlViTTextModel: no other part beside it)
    path = _file(tmp_path, "plain", body)
    assert "composite" not in _torch(path)["coverage"]
    assert "composite" not in _header(path)


def test_a_file_that_reads_another_part_of_the_composite_gets_no_line(tmp_path):
    # a vision-language forward with its images: the file holds the tower it read
    path = _file(tmp_path, "both", "m.model.language_model", head="m.model.vision_tower.proj")
    assert "composite" not in _torch(path)["coverage"]


def test_a_dynamo_file_names_the_composite_parts_its_unread_parameters_sit_in(tmp_path):
    # the graph signature lists the towers' parameters, which no op reads: the unread line names the
    # composite's parts instead of their first modules, and no second line is printed
    other = ["m.model.vision_tower.blocks.0.attn.qkv.weight", "m.model.vision_tower.patch_embed.weight",
             "m.model.multi_modal_projector.linear.weight"]
    path = _file(tmp_path, "dyn", "m.model.language_model", listed=other)
    t = _torch(path)
    comp = t["coverage"]["composite"]
    assert comp == {"language_part": "m.model.language_model",
                    "other_parts": ["m.model.multi_modal_projector", "m.model.vision_tower"]}
    assert sorted(t["coverage"]["unread_parameters"]) == sorted(other)
    head = " ".join(_header(path).split())
    assert ("not counted: 3 parameter(s) no op of the file reads (m.model.multi_modal_projector, "
            "m.model.vision_tower: the composite model's parts beside m.model.language_model); the file gives no "
            "size") in head
    assert "shared module" not in head  # a tower is read under no other name
    assert head.count("not counted") == 1  # no composite line of its own
    from memplan_cli.profiles.torch import coverage_line

    assert ("(m.model.multi_modal_projector, m.model.vision_tower: the composite model's parts beside "
            "m.model.language_model)") in coverage_line(t["coverage"])


def test_a_dynamo_file_whose_signature_lists_no_other_part_gets_no_line(tmp_path):
    # Gemma 4's composite built without its towers (their configs None): the signature lists nothing
    # beside the language part, so there is nothing eager holds that the figure leaves out
    path = _file(tmp_path, "dyn_alone", "m.model.language_model", listed=[])
    assert "composite" not in _torch(path)["coverage"]
    # a parameter no op reads elsewhere (a decoder's cross-attention) is no composite part
    path = _file(tmp_path, "dyn_elsewhere", "m.model.language_model", listed=["m.pooler.dense.weight"])
    t = _torch(path)
    assert "composite" not in t["coverage"] and t["coverage"]["unread_parameters"] == ["m.pooler.dense.weight"]


def test_the_dev_tool_runs_the_loaders_rule_on_files(tmp_path):
    from devtools.composite_parts import files_read_as_composites

    composite = _file(tmp_path, "composite", "m.model.text_model", head="m.classifier")
    plain = _file(tmp_path, "plain", "m.model")
    assert files_read_as_composites([composite, plain]) == [(composite, {"language_part": "m.model.text_model"})]


def test_the_dev_tool_says_where_a_dynamo_file_mentions_what_no_op_reads(tmp_path):
    # GIT's image encoder beside its read text encoder: the signature is the only place that names it
    # (by target and by placeholder), so the file holds no size for it; a TorchScript file is skipped
    from devtools.composite_parts import unread_traces

    listed = ["m.git.image_encoder.layers.0.weight", "m.git.image_encoder.norm.weight",
              "m.git.visual_projection.0.weight"]
    dyn = _file(tmp_path, "git_dyn", "m.git.encoder", head="m.output", listed=listed)
    ts = _file(tmp_path, "git_ts", "m.git.encoder", head="m.output")
    assert unread_traces([dyn, ts]) == [(dyn, [("m.git.image_encoder", 4, 4), ("m.git.visual_projection", 2, 2)])]
