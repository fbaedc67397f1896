import pytest

from memplan_cli.report.units import human, parse_size, percent


@pytest.mark.parametrize("n, text", [(0, "0 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
                                     (11360128, "10.83 MiB"), (3 * 1024**3, "3.00 GiB"), (-2048, "-2.00 KiB"),
                                     (None, "n/a")])
def test_human_uses_binary_units_with_two_decimals(n, text):
    assert human(n) == text


@pytest.mark.parametrize("text, n", [("1048576", 1048576), ("64MiB", 64 * 2**20), ("64 mib", 64 * 2**20),
                                     ("1.5GB", 1_500_000_000), ("512k", 512_000), ("2Ki", 2048), ("10B", 10)])
def test_parse_size_reads_si_and_binary_units(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["", "MiB", "1.2.3", "5 parsecs", "-1MiB", "1e6"])
def test_parse_size_rejects_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


def test_percent_is_relative_change_and_undefined_from_zero():
    assert percent(105, 100) == pytest.approx(5.0)
    assert percent(50, 100) == pytest.approx(-50.0)
    assert percent(0, 0) == 0.0
    assert percent(1, 0) is None



@pytest.mark.parametrize("text", ["5.5", "0.5", "1.25B"])
def test_a_fraction_of_a_byte_is_refused(text):
    with pytest.raises(ValueError, match="not a whole number of bytes"):
        parse_size(text)


def test_a_fraction_of_a_byte_under_a_unit_is_dropped():
    assert parse_size("1.1KiB") == 1126  # 1126.4
    assert parse_size("5.0") == 5
