#!/usr/bin/env python3
"""Fuzz the model loaders: mutate model bytes (bit flips, truncations, splices, overwrites) and check
that every load ends with a verified Graph or a ModelError, never another exception, within 5 s.

    .venv/bin/python scripts/fuzz_loaders.py [--runs N] [--seed S] [--batch-size B] [FILE ...]
    .venv/bin/python scripts/fuzz_loaders.py --exhaustive [--analyze] [FILE ...]

Without files it fuzzes the sample models. Prints the outcome counts and the slowest run.
--exhaustive replaces the random mutations by every one of a fixed set at every offset: each byte set
to 0x00, 0x7f, 0x80 and 0xff, and each aligned 32-bit word to 0x7fffffff, 0x80000000 and 0xffffffff
(a flatbuffer's offsets, lengths and indices are 32-bit words), plus every truncation; without
files, of the tests' tiny CNN as circle, tflite and ONNX.
The test suite runs a short, seeded version of the same loop (tests/loaders/test_fuzz.py).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

KINDS = ("flip", "flip", "truncate", "splice", "overwrite")


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    b = bytearray(data)
    kind = rng.choice(KINDS)
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[:rng.randrange(len(b))]
    elif kind == "splice":
        i, j = sorted(rng.randrange(len(b)) for _ in range(2))
        k = rng.randrange(len(b))
        b[k:k] = b[i:j][:4096]
    else:
        i = rng.randrange(len(b))
        b[i:i + 8] = rng.randbytes(8)
    return kind, bytes(b)


BYTES = (0x00, 0x7f, 0x80, 0xff)
WORDS = (0x7fffffff, 0x80000000, 0xffffffff)


def systematic(data: bytes):
    """Every fixed mutation of `data` (see --exhaustive), as (kind, bytes)."""
    for i in range(len(data)):
        for v in BYTES:
            if data[i] != v:
                yield "byte", data[:i] + bytes([v]) + data[i + 1:]
    for i in range(0, len(data) - 3, 4):
        for v in WORDS:
            yield "word", data[:i] + v.to_bytes(4, "little") + data[i + 4:]
    for n in range(len(data)):
        yield "truncate", data[:n]


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def fuzz_one(data: bytes, suffix: str, rng: random.Random, folder: str, batch_size: int | None = 3,
             analyze: bool = False, hang_after: int = 5):
    """Mutate once and load (`rng` None: `data` is a (kind, bytes) from `systematic`); with `analyze`,
    a model that loads is also analysed the way `memplan analyze` does (memplan profile with the onert comparison, then the JSON document).
    Returns (kind, outcome, seconds); outcome is "ok", "error" or a description."""
    from memplan_cli.errors import MemplanError, one_line
    from memplan_cli.loaders import load_model

    kind, b = mutate(data, rng) if rng is not None else data
    p = os.path.join(folder, "fuzz" + suffix)
    with open(p, "wb") as f:
        f.write(b)
    t = time.perf_counter()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(hang_after)
    try:
        load_model(p)
        if batch_size:
            load_model(p, batch_size=batch_size)
        if analyze:
            _analyze(p, batch_size)
        outcome = "ok"
    except MemplanError as e:
        # the CLI prints one_line(e): a name from the file with a newline in it stays on the line
        outcome = "error" if p in str(e) and "\n" not in one_line(e) else f"bad message: {e!r}"
    except Hang:
        outcome = f"hang (> {hang_after} s)"
    except Exception as e:  # noqa: BLE001 - any other exception is the finding
        outcome = f"{type(e).__name__}: {e}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return kind, outcome, time.perf_counter() - t


def _analyze(path: str, batch_size: int | None) -> None:
    from memplan_cli.analysis import analyze
    from memplan_cli.config import TrainConfig
    from memplan_cli.report.document import build_document

    a = analyze(path, TrainConfig(batch_size=batch_size, optimizer="adam"), compare_onert=True)
    build_document(a, by_layer=True)


def _tiny_models(folder: str) -> list[str]:
    """The tests' tiny CNN (tests/loaders: 5 ops, 3-4 KB) as circle, tflite and ONNX files in `folder`:
    --exhaustive's default, as the sample models would take 7 loads for each of millions of bytes."""
    import onnx

    from tests.loaders import fbmodels, onnxmodels

    out = []
    for fmt in ("circle", "tflite"):
        out.append(os.path.join(folder, f"tiny_cnn.{fmt}"))
        with open(out[-1], "wb") as f:
            f.write(fbmodels.tiny_cnn(fmt))
    out.append(os.path.join(folder, "tiny_cnn.onnx"))
    onnx.save(onnxmodels.tiny_cnn(), out[-1])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--runs", type=int, default=2000, help="mutations per file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=3, help="also load re-batched (0: no)")
    ap.add_argument("--analyze", action="store_true", help="also analyse every model that loads")
    ap.add_argument("--exhaustive", action="store_true", help="every fixed mutation at every offset instead "
                    "of --runs random ones (use small files: 7 loads per byte)")
    a = ap.parse_args(argv)
    files = a.files or [os.path.join(REPO, "sample_models", f"{n}.{x}") for n in ("mnist", "mobilenetv2")
                        for x in ("circle", "tflite", "onnx")]
    failures = 0
    with tempfile.TemporaryDirectory() as folder:
        if a.exhaustive and not a.files:
            files = _tiny_models(folder)
        for path in files:
            data = open(path, "rb").read()
            rng = random.Random(f"{a.seed}:{os.path.basename(path)}")
            counts: dict[str, int] = {}
            slowest = 0.0
            cases = systematic(data) if a.exhaustive else (None for _ in range(a.runs))
            runs = 0
            for case in cases:
                runs += 1
                kind, outcome, secs = fuzz_one(case or data, os.path.splitext(path)[1], None if case else rng,
                                                folder, a.batch_size or None, a.analyze)
                slowest = max(slowest, secs)
                key = outcome if outcome in ("ok", "error") else f"FAIL {kind}: {outcome[:160]}"
                counts[key] = counts.get(key, 0) + 1
            bad = {k: v for k, v in counts.items() if k.startswith("FAIL")}
            failures += sum(bad.values())
            print(f"{os.path.basename(path)}: {runs} runs, loaded {counts.get('ok', 0)}, "
                  f"ModelError {counts.get('error', 0)}, failures {sum(bad.values())}, slowest {slowest:.3f} s")
            for k, v in sorted(bad.items(), key=lambda kv: -kv[1])[:10]:
                print(f"  {v:5d} {k}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
