"""Sizes as text, and the one budget parser every command taking --budget shares: the same answer
for the same budget whichever command gets it (`--budget 0` is bad input everywhere, exit 2)."""
import pathlib

import pytest
from click.testing import CliRunner

from memplan_cli import api
from memplan_cli.cli import main
from memplan_cli.errors import ConfigError
from memplan_cli.sizes import parse_budget, parse_size

MNIST = str(pathlib.Path(__file__).parents[1] / "sample_models" / "mnist.circle")


@pytest.mark.parametrize("text, n", [("1048576", 1048576), ("64MiB", 64 * 2**20), ("64 mib", 64 * 2**20),
                                     ("1.5GB", 1_500_000_000), ("512kB", 512_000), ("2Ki", 2048), ("10B", 10)])
def test_parse_size_reads_si_and_binary_units(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text, says", [("64M", "write 64MB (64 x 1000^2 bytes) or 64MiB (64 x 1024^2 bytes)"),
                                        ("512k", "512KB"), ("1.5G", "1.5GiB"), ("2t", "2TB")])
def test_a_bare_unit_letter_is_refused_as_ambiguous(text, says):
    with pytest.raises(ValueError, match="ambiguous") as e:
        parse_size(text)
    assert says in str(e.value)
    r = CliRunner().invoke(main, ["fit", MNIST, "--budget", text])
    assert r.exit_code == 2 and "ambiguous" in r.stderr


@pytest.mark.parametrize("text", ["", "MiB", "1.2.3", "5 parsecs", "-1MiB", "1e6"])
def test_parse_size_rejects_what_is_not_a_size(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["5.5", "0.5", "1.25B"])
def test_a_fraction_of_a_byte_is_refused(text):
    with pytest.raises(ValueError, match="not a whole number of bytes"):
        parse_size(text)


def test_a_fraction_of_a_byte_under_a_unit_is_dropped():
    assert parse_size("1.1KiB") == 1126  # 1126.4
    assert parse_size("5.0") == 5


@pytest.mark.parametrize("budget, n", [("64KiB", 65536), (4096, 4096), ("1", 1)])
def test_a_budget_is_a_positive_size(budget, n):
    assert parse_budget(budget) == n


@pytest.mark.parametrize("budget", ["0", 0, "0.0001KiB", -5, "lots", "5.5", True, 1.5, None])
def test_a_budget_that_is_no_positive_size_is_bad_input(budget):
    with pytest.raises(ConfigError, match="budget"):
        parse_budget(budget)


@pytest.mark.parametrize("command", [["analyze"], ["verify"], ["fit"], ["sweep"]])
@pytest.mark.parametrize("budget", ["0", "0.0001KiB", "lots"])
def test_every_command_answers_a_bad_budget_alike(command, budget):
    r = CliRunner().invoke(main, [*command, MNIST, "--budget", budget])
    assert r.exit_code == 2, r.output
    assert r.output.count("\n") == 1 and "--budget" in r.output


def test_the_api_answers_a_zero_budget_as_the_cli():
    # the same refusal, worded with the API's keyword (the CLI's names --budget)
    with pytest.raises(ConfigError, match="^budget must be > 0 bytes") as e:
        api.analyze(MNIST, budget=0)
    assert e.value.cli_text() == "--budget must be > 0 bytes, got 0"
