from memplan_cli.buffers import Buffer, BufferList, Step
from memplan_cli.report.layers import NO_OWNER, per_layer
from memplan_cli.report.live import timeline


def _bl():
    steps = [Step(0, "forward", 0), Step(1, "forward", 1), Step(2, "calcGradient", 1), Step(3, "calcDerivative", 1),
             Step(4, "calcGradient", 0)]
    bufs = [
        Buffer("x0", "non-const", 100, 0, 4, owner="#0 Conv2D"),  # kept for backward
        Buffer("x1", "non-const", 40, 1, 1, owner="#1 Relu"),  # forward only
        Buffer("w0", "trainable", 8, 0, 4, owner="#0 Conv2D"),
        Buffer("g0", "gradient", 8, 4, 4, owner="#0 Conv2D"),
        Buffer("bp1", "back-prop", 40, 3, 4, owner="#1 Relu"),
        Buffer("t", "extra", 16, 2, 2, owner="#1 Relu"),
        Buffer("l", "disposable", 4, 2, 3),
    ]
    return BufferList(bufs, steps)


def test_per_layer_splits_bytes_by_role_and_marks_the_peak_share():
    bl = _bl()
    view = per_layer(bl, None, timeline(bl))
    rows = {r["op"]: r for r in view["rows"]}
    assert [r["op"] for r in view["rows"]] == ["#0 Conv2D", "#1 Relu", NO_OWNER]
    conv, relu = rows["#0 Conv2D"], rows["#1 Relu"]
    assert (conv["activations"], conv["kept_for_backward"], conv["weights"], conv["gradient"]) == (100, 100, 8, 8)
    assert (relu["activations"], relu["kept_for_backward"], relu["back-prop"], relu["other"]) == (40, 0, 40, 16)
    # the peak is step 4 (x0 + w0 + g0 + bp1 = 156); step 2 has x0 + w0 + t + l = 128
    assert conv["at_peak"] == 116 and relu["at_peak"] == 40 and rows[NO_OWNER]["at_peak"] == 0
    assert view["largest_at_peak"] == "#0 Conv2D"


def test_profile_columns_are_appended_through_the_hook():
    bl = _bl()
    view = per_layer(bl, None, timeline(bl), {"#1 Relu": {"fwd_mem_tmp": 7, "bwd_mem_out": 3}})
    assert view["columns"][-2:] == ["fwd_mem_tmp", "bwd_mem_out"]
    rows = {r["op"]: r for r in view["rows"]}
    assert rows["#1 Relu"]["fwd_mem_tmp"] == 7 and rows["#0 Conv2D"]["fwd_mem_tmp"] == 0
