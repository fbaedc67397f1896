from memplan_cli.buffers import Buffer, BufferList, Step
from memplan_cli.report.live import step_label, timeline
from memplan_cli.report.sparkline import sparkline


def _bl():
    steps = [Step(0, "forward", 0, "#0 A"), Step(1, "forward", 1, "#1 B"), Step(2, "calcGradient", 1, "#1 B"),
             Step(3, "calcDerivative", 0, "#0 A")]
    bufs = [Buffer("a", "non-const", 100, 0, 2), Buffer("w", "trainable", 10, 0, 3),
            Buffer("g", "gradient", 10, 2, 2), Buffer("bp", "back-prop", 50, 2, 3)]
    return BufferList(bufs, steps)


def test_timeline_sums_live_bytes_per_category_over_inclusive_lifetimes():
    tl = timeline(_bl())
    assert tl.total == [110, 110, 170, 60]
    assert tl.peak_step == 2 and tl.peak_bytes == 170
    assert tl.at(2) == {"non-const": 100, "trainable": 10, "back-prop": 50, "gradient": 10, "opt-variable": 0,
                        "disposable": 0, "extra": 0}


def test_timeline_peak_is_the_first_of_equal_maxima():
    bl = BufferList([Buffer("a", "extra", 5, 1, 1), Buffer("b", "extra", 5, 3, 3)], [Step(k, "forward", -1) for k in range(4)])
    assert timeline(bl).peak_step == 1


def test_step_label_names_the_step_kind_and_op():
    assert step_label(_bl(), None, 2) == ("2 (calcGradient)", "#1 B")
    assert step_label(_bl(), None, 9) == ("9", "")


def test_sparkline_has_one_bar_per_value_and_the_peak_is_the_tallest():
    line = sparkline([0, 10, 50, 100, 20])
    assert len(line) == 5 and line[3] == "█" and line[0] == "▁"
    assert len(sparkline(range(500), width=40)) == 40
    assert sparkline([]) == ""
