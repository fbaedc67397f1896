"""The terminal view: what it says, and colour only when asked for."""
from memplan_cli.analysis import analyze_graph, compare_with_onert
from memplan_cli.config import TrainConfig
from memplan_cli.report import REPORTER_BY_NAME, get_reporter
from memplan_cli.report.document import build_document
from memplan_cli.report.output import RenderOptions, use_color
from tests.report.conftest import tiny_graph


def _doc(profile="memplan", onert=True, **kw):
    a = analyze_graph(tiny_graph(), TrainConfig(optimizer="adam"), profile=profile)
    a.model_path, a.model_sha256 = "tiny.circle", "0" * 64
    if onert:
        a.onert = compare_with_onert(a.graph, a.config)
    return a, build_document(a, **kw)


def test_registry_names_are_the_format_choices():
    assert set(REPORTER_BY_NAME) == {"table", "json", "csv"}
    assert all(REPORTER_BY_NAME[n]().name == n for n in REPORTER_BY_NAME)


def test_table_shows_every_row_and_column_with_exact_bytes_and_units(fake_profiles):
    a, doc = _doc()
    narrow = get_reporter("table").analysis(doc, RenderOptions(width=80))
    assert f"{a.planned_total:,d}" not in narrow.split("lower bound:")[0] and "exact bytes: -f json" in narrow
    text = get_reporter("table").analysis(doc, RenderOptions(width=140))
    for row in ("non-const", "trainable", "back-prop", "gradient", "opt variable", "disposable", "extra", "total"):
        assert row in text
    for col in ("naive", "onert", "memplan planned", "live at peak"):
        assert col in text
    assert f"{a.planned_total:,d}" in text and f"{a.naive_total:,d}" in text
    assert "KiB" in text
    assert f"arena / lower bound = {a.planned_total / a.lower_bound:.3f}" in text
    assert "\x1b[" not in text  # no colour codes unless asked


def test_table_says_na_with_the_reason_when_onert_cannot_train(fake_profiles):
    a = analyze_graph(tiny_graph(concat=True), TrainConfig(), profile="memplan")
    a.model_path, a.model_sha256 = "t.circle", "0" * 64
    a.onert = compare_with_onert(a.graph, a.config)
    text = get_reporter("table").analysis(build_document(a), RenderOptions())
    assert "onert: n/a (onert cannot train Concat)" in text


def test_onert_profile_lists_alloc_lines_in_order_and_the_one_grouping(fake_profiles):
    a, doc = _doc(profile="onert", onert=False)
    text = get_reporter("table").analysis(doc, RenderOptions())
    pos = [text.index(f"│ {k} │") for k in range(1, 8)]
    assert pos == sorted(pos)
    assert "grouped as ONE publishes them" in text and "extra tensors" in text


def test_quiet_is_one_line_and_qq_is_nothing(fake_profiles):
    a, doc = _doc()
    line = get_reporter("table").analysis(doc, RenderOptions(verbosity=0))
    assert line.count("\n") == 1 and f"planned {a.planned_total} B" in line
    assert get_reporter("table").analysis(doc, RenderOptions(verbosity=-1)) == ""


def test_verbose_adds_pools_and_timings(fake_profiles):
    a, doc = _doc()
    text = get_reporter("table").analysis(doc, RenderOptions(verbosity=2, timings={"plan": 0.5}))
    assert "pools (arenas)" in text and "plan 500 ms" in text


def test_colour_only_when_asked_and_never_with_no_color(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color("always") is True
    assert use_color("never") is False
    assert use_color("auto") is False  # pytest's stdout is not a terminal
    assert use_color("always", to_file=True) is False
    monkeypatch.setenv("NO_COLOR", "1")

    class Tty:
        def isatty(self):
            return True
    assert use_color("auto", stream=Tty()) is False
    monkeypatch.setenv("NO_COLOR", "")  # only a non-empty NO_COLOR counts
    assert use_color("auto", stream=Tty()) is True


def test_colour_codes_appear_when_forced(fake_profiles):
    a, doc = _doc()
    assert "\x1b[" in get_reporter("table").analysis(doc, RenderOptions(color=True))


def test_csv_has_one_figure_per_row(fake_profiles):
    a, doc = _doc(by_layer=True)
    lines = get_reporter("csv").analysis(doc, RenderOptions()).splitlines()
    assert lines[0] == "section,name,field,bytes"
    assert f"total,planned,bytes,{a.planned_total}" in lines
    assert f"category,gradient,naive,{a.naive_by_category['gradient']}" in lines
    assert any(line.startswith("layer,#0 FullyConnected (fc1),activations,") for line in lines)


def test_prose_never_parts_a_figure_from_its_unit():
    import re

    from rich.text import Text

    from memplan_cli.report.table import _console

    con = _console(RenderOptions(width=40))
    line = "peak: 7.86 MiB live (non-const 747.27 KiB, trainable 1.85 MiB, gradient 1.53 MiB, 38.5 % less, 0.615 x)"
    con.print(line)
    con.print(Text(line, style="bold"))
    out = con.text()
    assert "\ue000" not in out
    lines = out.splitlines()
    assert len(lines) > 4  # it did wrap
    assert not any(re.match(r"(B|KiB|MiB|%|x)\b", ln) for ln in lines), out
    assert " ".join(ln.strip() for ln in lines[: len(lines) // 2]) == line


def test_a_private_use_character_from_a_file_is_escaped_not_turned_into_a_space():
    from rich.text import Text

    from memplan_cli.report.table import _console

    con = _console(RenderOptions(width=80))
    con.print("model a\ue000b.onnx 12 MiB")
    con.print(Text("op c\ue000d", style="bold"))
    assert con.text() == "model a\\ue000b.onnx 12 MiB\nop c\\ue000d\n"
