#!/usr/bin/env python3
"""Run the training-mode flags on every model of a corpus and report crashes (dev-only).

    .venv/bin/python scripts/sweep_modes.py [--corpus ../corpus] [--memplan .venv/bin/memplan]

For each model in the corpus manifest (scripts/build_corpus.py): `analyze --lora 8`, `analyze --train
biases`, `compare -f json`, `analyze --trainable-ops 3 --by-layer` and `analyze --batchnorm frozen`.
An answer (exit 0) or a one-line refusal (exit 2) is fine; any other exit, a traceback or a timeout is
printed. Ends with `done N` (N: how many runs went wrong).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="../corpus")
    ap.add_argument("--memplan", default=".venv/bin/memplan")
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args(argv)
    with open(os.path.join(args.corpus, "manifest.json")) as f:
        models = json.load(f)["models"]
    bad = 0
    for m in models:
        path = os.path.join(args.corpus, m["file"])
        for flags in (["analyze", "-q", "--lora", "8"], ["analyze", "-q", "--train", "biases"], ["compare", "-f", "json"],
                      ["analyze", "-q", "--trainable-ops", "3", "--by-layer"], ["analyze", "-f", "json", "--batchnorm", "frozen"]):
            cmd = [args.memplan, flags[0], path, "-O", "adam", *flags[1:]]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                rc, err = r.returncode, r.stderr
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            if rc not in (0, 2) or "Traceback" in err:
                bad += 1
                last = err.strip().splitlines()[-1][:200] if err.strip() else ""
                print(f"{m['name']}: {' '.join(flags)}: exit {rc} {last}", flush=True)
    print(f"done {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
