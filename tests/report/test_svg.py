"""The timeline picture: a valid SVG with one area per category present, the peak, bound and arena."""
import xml.etree.ElementTree as ET

from memplan_cli.buffers import Buffer, BufferList, Step
from memplan_cli.report.live import timeline
from memplan_cli.report.svg import render_svg

NS = "{http://www.w3.org/2000/svg}"


def _svg():
    steps = [Step(k, "forward" if k < 2 else "calcGradient", 0) for k in range(4)]
    bl = BufferList([Buffer("a", "non-const", 3000, 0, 2), Buffer("g", "gradient", 1000, 2, 3),
                     Buffer("w", "trainable", 500, 0, 3)], steps)
    return render_svg(timeline(bl), title="t & <model>", lower_bound=4500, planned=5000, peak_label="#0 Conv2D",
                      forward_end=1)


def test_svg_parses_and_draws_each_category_present():
    root = ET.fromstring(_svg())
    titles = [p.find(f"{NS}title").text for p in root.iter(f"{NS}polygon")]
    assert titles == ["non-const", "trainable", "gradient"]


def test_svg_marks_the_peak_and_draws_bound_and_arena():
    texts = [t.text or "" for t in ET.fromstring(_svg()).iter(f"{NS}text")]
    text = "".join(texts)
    assert "peak 4.39 KiB at step 2 (#0 Conv2D)" in text
    # the legend names each line, its value on the next row
    assert texts[texts.index("lower bound") + 1] == "4.39 KiB"
    assert texts[texts.index("planned") + 1] == "4.88 KiB"
    assert "forward" in text and "backward" in text
    assert "t & <model>" in text  # escaped in the file, intact once parsed
