"""`memplan verify` end to end on the mnist sample: both profiles' plans pass, and a plan with one
buffer's lifetime shortened, or one offset moved onto a live neighbour, fails with exit status 1 and a
report naming the step and the buffers."""
import json
import pathlib

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
import memplan_cli.verification as verify_mod
from tests.execute.helpers import with_placement

MNIST = str(pathlib.Path(__file__).parents[2] / "sample_models" / "mnist.circle")


def run(*args):
    return CliRunner().invoke(main, ["verify", *args], env={"NO_COLOR": "1"})


@pytest.mark.parametrize("profile,optimizer", [("memplan", "sgd"), ("memplan", "adam"), ("onert", "adam")])
def test_the_plans_of_both_profiles_hold(profile, optimizer):
    r = run(MNIST, "-b", "2", "-O", optimizer, "--profile", profile, "-f", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["passed"] and doc["failure"] is None
    assert doc["max_difference"] == 0.0
    assert doc["weights_updated"] == 12  # 6 weighted ops: kernel + bias each
    assert doc["steps_run"] == doc["steps"]
    assert doc["loss"]["arena"] == doc["loss"]["reference"]
    assert doc["arena_bytes"] == sum(p["arena"] for p in doc["pools"])


def test_the_torch_profile_is_refused_in_one_line(tmp_path):
    # its figure models PyTorch's allocator over eager's tensors; there is no arena to run a step in,
    # so a verdict either way would be made up: exit 2, the file named, nothing written
    out = tmp_path / "v.json"
    r = run(MNIST, "-b", "2", "-p", "torch", "-f", "json", "-o", str(out))
    assert r.exit_code == 2
    (line,) = r.output.splitlines()
    assert MNIST in line and "--profile torch models PyTorch's allocator" in line
    assert not out.exists()
    # the suggestion names only profiles verify runs
    assert "nntrainer" not in line


def test_the_nntrainer_profile_is_refused_naming_the_file(tmp_path):
    # its plan is of nntrainer's own layer graph; the line said "profile 'nntrainer' does not expose the
    # training graph it planned" without the file, and the README listed nntrainer among verify's plans
    out = tmp_path / "v.json"
    r = run(MNIST, "-b", "2", "-p", "nntrainer", "-f", "json", "-o", str(out))
    assert r.exit_code == 2
    (line,) = r.output.splitlines()
    assert f"cannot verify {MNIST}: the nntrainer profile" in line and "memplan, onert and singa" in line, line
    assert not out.exists()


def test_table_output(tmp_path):
    r = run(MNIST, "-b", "2")
    assert r.exit_code == 0, r.output
    assert "PASS: the plan holds for one training step" in r.stdout
    assert "largest difference 0" in r.stdout and "12 updated, all equal to the reference" in r.stdout
    r = run(MNIST, "-b", "2", "-q")
    assert r.stdout.startswith("PASS ") and len(r.stdout.splitlines()) == 1
    # one line for scripts whatever the path's length (a long checkout's path once wrapped it)
    deep = tmp_path.joinpath(*["a_rather_long_directory_name"] * 4)
    deep.mkdir(parents=True)
    model = deep / "mnist.circle"
    model.write_bytes(pathlib.Path(MNIST).read_bytes())
    r = run(str(model), "-b", "2", "-q")
    assert r.stdout.startswith("PASS ") and len(r.stdout.splitlines()) == 1 and str(model) in r.stdout


def _faulty(monkeypatch, fault):
    """Make `memplan verify` run the plan with `fault(tg, layout) -> (layout, facts)` applied."""
    facts = {}
    real = verify_mod.layout_from_pools

    def patched(tg, pools, profile="", locate=None):
        lay = real(tg, pools, profile, locate=locate)
        bad, f = fault(tg, lay)
        facts.update(f)
        return bad

    monkeypatch.setattr(verify_mod, "layout_from_pools", patched)
    return facts


def _shorten(tg, lay):
    """Shorten, by one step, the lifetime of the first non-persistent buffer read at its last step."""
    groups = tg.groups()
    for r, p in sorted(lay.placements.items(), key=lambda kv: kv[1].first):
        if p.last == p.first or any(m in tg.persistent for m in groups[r]):
            continue
        s = tg.steps[p.last]
        if any(tg.root(t) == r for t in s.reads):
            return with_placement(lay, r, last=p.last - 1), {"name": p.name, "step": p.last}
    raise AssertionError("no buffer to shorten")


def _overlap(tg, lay):
    """Move the largest non-persistent buffer onto another buffer live at the same time."""
    groups = tg.groups()
    cands = [(r, p) for r, p in lay.placements.items()
             if p.size and not any(m in tg.persistent for m in groups[r])]
    r, p = max(cands, key=lambda rp: rp[1].size)
    for q_root, q in sorted(lay.placements.items(), key=lambda kv: kv[1].first):
        if q_root != r and q.size and q.first <= p.last and p.first <= q.last and q.offset != p.offset:
            return with_placement(lay, r, offset=q.offset), {"name": p.name, "other": q.name}
    raise AssertionError("no live neighbour")


@pytest.mark.parametrize("no_live_check", [False, True])
def test_a_shortened_lifetime_fails_naming_the_step_and_the_buffer(monkeypatch, no_live_check):
    facts = _faulty(monkeypatch, _shorten)
    r = run(MNIST, "-b", "2", *(["--no-live-check"] if no_live_check else []))
    assert r.exit_code == 1, r.output
    out = r.stdout
    assert f"FAIL: step {facts['step']} (" in out, out
    assert facts["name"] in out.split("FAIL: ", 1)[1]
    assert f"buffers involved: {facts['name']}" in out
    if no_live_check:  # the data shows it: the buffer was poisoned when its (shortened) lifetime ended
        assert "no longer holds what step" in out and "does not cover step" in out
    else:
        assert f"is not live at step {facts['step']}" in out
    doc = json.loads(run(MNIST, "-b", "2", "-f", "json", *(["--no-live-check"] if no_live_check else [])).stdout)
    assert doc["passed"] is False
    assert doc["failure"]["step"] == facts["step"] and facts["name"] in doc["failure"]["buffers"]


def test_an_offset_moved_onto_a_live_neighbour_fails_naming_both_buffers(monkeypatch):
    facts = _faulty(monkeypatch, _overlap)
    monkeypatch.setenv("COLUMNS", "1000")  # one line per finding: the lists below are read line by line
    r = run(MNIST, "-b", "2", "-O", "adam")
    assert r.exit_code == 1, r.output
    out = r.stdout
    tail = out.split("FAIL: step ", 1)[1]
    step = int(tail.split()[0])
    # the first divergence may come from any buffer the moved one now covers; the moved one is named
    involved = tail.split("buffers involved: ", 1)[1].splitlines()[0]
    assert facts["name"] in involved, out
    # and the plan's overlaps are listed, the targeted neighbour among them
    clash = tail.split("pair(s) of live buffers on shared bytes: ", 1)[1]
    doc = json.loads(run(MNIST, "-b", "2", "-O", "adam", "-f", "json").stdout)
    pairs = [set(c["buffers"]) for c in doc["failure"]["overlapping_live_buffers"]]
    assert {facts["name"], facts["other"]} in pairs
    assert all(facts["name"] in p for p in pairs)
    assert facts["name"] in clash
    q = run(MNIST, "-b", "2", "-O", "adam", "-q")
    assert q.exit_code == 1 and q.stdout.startswith(f"FAIL {MNIST} (memplan): step {step}: ")
