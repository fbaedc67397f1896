"""Time domains: each pool counts time in its domain (`Pool.domain`); peaks, "live at peak", the
sparkline and lower bounds are taken per domain and added up, never across domains.

The onert profile gives each category pool its own domain (onert's planner counts claim/release
events per category): its lower bound is the sum of its pools' own bounds, at least each of them,
equal to what `memplan compare` shows, and never below what is live for the whole step (weights,
optimizer state, kernel buffers)."""
import json
import pathlib

from click.testing import CliRunner

from memplan_cli.analysis import analyze, domain_lower_bound
from memplan_cli.buffers import Buffer, BufferList, Pool, Step
from memplan_cli.cli import main
from memplan_cli.comparison import compare
from memplan_cli.config import TrainConfig
from memplan_cli.report.document import build_document
from memplan_cli.report.live import live_at_peak, peak_summary

ROOT = pathlib.Path(__file__).parents[2]
MNIST = str(ROOT / "sample_models" / "mnist.circle")


def two_pools(domain_a, domain_b):
    bufs = [Buffer("a0", "non-const", 100, 0, 1, pool="A"), Buffer("a1", "non-const", 50, 2, 3, pool="A"),
            Buffer("b0", "back-prop", 70, 2, 3, pool="B"), Buffer("b1", "back-prop", 10, 0, 0, pool="B")]
    return BufferList(bufs, [Step(i, "forward", -1) for i in range(4)],
                      [Pool("A", "non-const", "naive", domain_a), Pool("B", "back-prop", "naive", domain_b)])


def test_one_domain_is_one_timeline_two_domains_add_their_own_peaks():
    shared = two_pools("steps", "steps")
    assert domain_lower_bound(shared) == 120  # step 2 or 3: a1 + b0; a0 + b1 = 110 at step 0
    assert peak_summary(shared, None)["step"] == 2 and live_at_peak(shared) == {1, 2}
    apart = two_pools("A", "B")
    # A's own peak is a0 (100), B's is b0 (70): nothing is "live together" across domains
    assert domain_lower_bound(apart) == 170
    pk = peak_summary(apart, None)
    assert pk["step"] == -1 and pk["bytes"] == 170 and [d["domain"] for d in pk["domains"]] == ["A", "B"]
    assert pk["categories"]["non-const"] == 100 and pk["categories"]["back-prop"] == 70
    assert live_at_peak(apart) == {0, 2}


def onert_mnist():
    return analyze(MNIST, TrainConfig(batch_size=32, optimizer="adam", loss="cce"), profile="onert")


def test_onert_lower_bound_is_its_pools_bounds_summed_and_compares_equal():
    a = onert_mnist()
    pools = {p.pool.name: p for p in a.pools}
    assert a.lower_bound == sum(p.lower_bound for p in a.pools)
    assert all(a.lower_bound >= p.lower_bound for p in a.pools)
    # trainable weights, Adam's state and the kernel buffers are live for the whole step
    always = sum(p.lower_bound for p in a.pools if p.pool.category in ("trainable", "opt-variable", "extra"))
    assert a.lower_bound >= always + pools["onert:non-const"].lower_bound
    assert a.lower_bound <= a.planned_total
    cmp = compare(MNIST, TrainConfig(batch_size=32, optimizer="adam", loss="cce"))
    assert cmp.column("onert").lower_bound == a.lower_bound

    doc = build_document(a, by_layer=True)
    assert doc["totals"]["lower_bound"] == a.lower_bound == doc["peak"]["bytes"]
    assert sum(doc["peak"]["categories"].values()) == a.lower_bound
    assert len(doc["peak"]["domains"]) >= 6 and doc["peak"]["step"] == -1
    assert sum(r["at_peak"] for r in doc["by_layer"]["rows"]) == a.lower_bound


def test_memplan_profile_keeps_one_shared_timeline():
    a = analyze(MNIST, TrainConfig(batch_size=32, optimizer="adam", loss="cce"))
    doc = build_document(a)
    assert "domains" not in doc["peak"] and doc["peak"]["step"] >= 0
    assert doc["totals"]["lower_bound"] == doc["peak"]["bytes"]


def run(*args):
    return CliRunner().invoke(main, ["analyze", MNIST, "-b", "32", "-O", "adam", "-l", "cce", *args])


def test_onert_table_prints_per_domain_figures_and_json_agrees(tmp_path):
    r = run("-p", "onert")
    assert r.exit_code == 0, r.output
    out = " ".join(r.stdout.split())
    doc = json.loads(run("-p", "onert", "-f", "json").stdout)
    lb = doc["totals"]["lower_bound"]
    assert f"lower bound: {lb:,d} B" in out and "time domains' own peaks" in out
    assert "events of onert:back-prop:" in out and "live over" in out
    # no picture across domains: the SVG timeline is refused, and nothing is written
    svg = tmp_path / "t.svg"
    r = run("-p", "onert", "--timeline", str(svg))
    assert r.exit_code == 2 and "no shared time axis" in r.stderr and not svg.exists()


def test_diff_fails_on_lower_bound_with_the_per_domain_figure(tmp_path):
    base = tmp_path / "base.json"
    base.write_text(run("-p", "onert", "-f", "json").stdout)
    r = CliRunner().invoke(main, ["diff", "--baseline", str(base), MNIST, "-b", "64", "-f", "json",
                                  "--fail-on", "lower_bound:+1%"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 1, r.output
    row = [x for x in doc["rows"] if x.get("key") == "lower_bound" or x.get("name") == "lower_bound"]
    assert row and row[0]["new"] > row[0]["old"]
