import pytest

from memplan_cli.report.units import human, percent


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
                                     (11360128, "10.83 MiB"), (3 * 1024**3, "3.00 GiB"), (-2048, "-2.00 KiB"),
                                     (None, "n/a")])
def test_human_uses_binary_units_with_two_decimals(n, text):
    assert human(n) == text


def test_percent_is_relative_change_and_undefined_from_zero():
    assert percent(105, 100) == pytest.approx(5.0)
    assert percent(50, 100) == pytest.approx(-50.0)
    assert percent(0, 0) == 0.0
    assert percent(1, 0) is None
