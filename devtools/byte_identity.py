"""Byte-identity check for refactors: record what memplan prints for every model of tests/corpus,
tests/corpus/params and sample_models (analyze -b 4 -O adam -l cce -f json with the memplan, onert and
torch profiles; analyze --budget, and verify with and without --budget, on the samples), from two
source trees, and compare the records byte for byte.

    python devtools/byte_identity.py snapshot REV DIR    # `git archive REV` unpacked into DIR
    python devtools/byte_identity.py record SRC OUT      # run SRC's memplan_cli (PYTHONPATH=SRC)
    python devtools/byte_identity.py diff OUT_A OUT_B    # exit 1 when any case differs

Each case is one file in OUT: the exit status, stdout and stderr, with SRC's own path replaced by
`SRC` (error lines name the model's path). JOBS=N runs N cases at once (default 2). Run both
records with the same Python (one with memplan's dependencies installed).
"""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# the corpus exports with a symbolic sequence length (as tests/test_corpus.py binds them)
DIMS = {"gpt2_tiny_seq_dynamo.onnx": ["--dim", "seq=8"], "bert_tiny_seq_ts.onnx": ["--dim", "seq=8"]}
SETUP = ["-b", "4", "-O", "adam", "-l", "cce"]
FOLDERS = ("tests/corpus", "tests/corpus/params", "sample_models")


def models(src: Path) -> list[Path]:
    out = []
    for d in FOLDERS:
        out += sorted(p for p in (src / d).iterdir() if p.suffix in (".onnx", ".tflite", ".circle"))
    return out


def cases(src: Path):
    """(case name, memplan arguments) for every case of the check."""
    for m in models(src):
        rel, dims = m.relative_to(src), DIMS.get(m.name, [])
        for profile in ("memplan", "onert", "torch"):
            yield f"{rel}__{profile}", ["analyze", str(m), *SETUP, "-f", "json", "-p", profile, *dims]
    mnist, mobilenet = src / "sample_models/mnist.onnx", src / "sample_models/mobilenetv2.onnx"
    yield "budget_mnist", ["analyze", str(mnist), *SETUP, "-f", "json", "--budget", "600KiB"]
    yield "budget_mnist_bf16_mixed", ["analyze", str(mnist), *SETUP, "-f", "json", "--budget", "600KiB",
                                      "--precision", "bf16-mixed"]
    yield "budget_mobilenetv2", ["analyze", str(mobilenet), *SETUP, "-f", "json", "--budget", "40MiB"]
    yield "budget_mobilenetv2_table", ["analyze", str(mobilenet), *SETUP, "--budget", "40MiB"]
    yield "table_mobilenetv2", ["analyze", str(mobilenet), *SETUP]
    yield "verify_mnist", ["verify", str(mnist), *SETUP, "-f", "json"]
    yield "verify_mnist_budget", ["verify", str(mnist), *SETUP, "-f", "json", "--budget", "600KiB"]


def run(src: Path, out: Path, name: str, args: list[str]) -> tuple[str, int]:
    env = dict(os.environ, PYTHONPATH=str(src), COLUMNS="80", NO_COLOR="1")
    p = subprocess.run([sys.executable, "-m", "memplan_cli", *args], capture_output=True, env=env, cwd=src)
    here = str(src).encode()
    text = b"rc=%d\n--stdout--\n%s\n--stderr--\n%s" % (p.returncode, p.stdout.replace(here, b"SRC"),
                                                       p.stderr.replace(here, b"SRC"))
    (out / name.replace("/", "_")).write_bytes(text)
    return name, p.returncode


def record(src: str, out: str) -> int:
    src_dir, out_dir = Path(src).resolve(), Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = list(cases(src_dir))
    with ThreadPoolExecutor(int(os.environ.get("JOBS", "2"))) as pool:
        for name, rc in pool.map(lambda c: run(src_dir, out_dir, *c), todo):
            print(rc, name, flush=True)
    print(f"{len(todo)} cases")
    return 0


def diff(a: str, b: str) -> int:
    pa, pb = Path(a), Path(b)
    names = sorted({p.name for p in pa.iterdir()} | {p.name for p in pb.iterdir()})
    bad = [n for n in names if not (pa / n).is_file() or not (pb / n).is_file()
           or (pa / n).read_bytes() != (pb / n).read_bytes()]
    for n in bad:
        print("differs:", n)
    print(f"{len(names)} cases, {len(bad)} differ")
    return 1 if bad else 0


def snapshot(rev: str, folder: str) -> int:
    Path(folder).mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
    return 0


if __name__ == "__main__":
    commands = {"record": record, "diff": diff, "snapshot": snapshot}
    if len(sys.argv) != 4 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    sys.exit(commands[sys.argv[1]](sys.argv[2], sys.argv[3]))
