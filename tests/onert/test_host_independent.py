"""The onert profile never reads its host: the same command gives byte-identical JSON whatever
`os.cpu_count()` says, the defaults describe a stated device, flags override them, and the report
records the values used."""
import json
import os
import pathlib

import pytest
from click.testing import CliRunner

from memplan_cli.cli import main
from memplan_cli.profiles.onert import kernels

ROOT = pathlib.Path(__file__).parents[2]
MOBILENET = str(ROOT / "sample_models" / "mobilenetv2.circle")


def analyze(*args):
    r = CliRunner().invoke(main, ["analyze", MOBILENET, "-b", "2", "-p", "onert", "-f", "json", *args],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("flags", [(), ("-p", "memplan")])
def test_output_does_not_depend_on_the_host_cpu_count(monkeypatch, flags):
    outs = []
    for n in (2, 16):
        monkeypatch.setattr(os, "cpu_count", lambda n=n: n)
        outs.append(analyze(*flags))
    assert outs[0] == outs[1]


def test_defaults_are_recorded_and_flags_override_them():
    doc = json.loads(analyze())
    assert doc["config"]["profile_options"] == {"simd_width": kernels.DEFAULT_SIMD_WIDTH,
                                                "threads": kernels.DEFAULT_THREADS}
    more = json.loads(analyze("--onert-threads", "15", "--onert-simd-width", "16"))
    assert more["config"]["profile_options"] == {"simd_width": 16, "threads": 15}
    # MobileNetV2's depthwise convs hold per-thread buffers padded to the packet width: more bytes
    assert more["totals"]["planned"] > doc["totals"]["planned"]


def test_help_names_the_default_device_not_this_machine():
    for cmd in ("analyze", "compare", "sweep", "verify"):
        out = CliRunner().invoke(main, [cmd, "--help"]).stdout
        assert "this machine's." not in out.replace("never this machine's", "")
        assert "Default 4: a 4-core CPU with 128-bit SIMD" in " ".join(out.split()), cmd
