"""Fast start: memplan's whole process against onert 0.1.0 loading and compiling the same model.

Side by side in one run, each measured in its own child process, alternating, REPEAT times:
(a) memplan: the whole process `memplan analyze MODEL -b 10 -O adam -p onert -f json` (interpreter
    start, imports, load, build, plan, report): wall time and peak RSS;
(b) onert 0.1.0: a child interpreter that loads MODEL and compiles it for training at the same
    batch and optimizer (`session(MODEL, "train")` + `compile`, as devtools/onert_runtime.py does):
    the load + compile time measured inside the child (interpreter start and imports excluded,
    which favours onert), its whole-process wall time, and its peak RSS;
(c) with --fresh-venv: the README's first command (`memplan analyze sample_models/mnist.circle`)
    in a new venv right after `pip install` of this checkout, first run and second run.
Wall times are medians over the repeats; peak RSS is the child's own high-water mark
(`os.wait4`'s ru_maxrss), the largest over the repeats. Then the ratios against issue 14's targets:
memplan's whole process <= 0.35 x onert's load + compile time, <= 0.10 x onert's peak RSS, and
the first command <= 1.5 s on its first run after a fresh install.

    .venv/bin/python benchmarks/start_bench.py [--repeat 5] [--model sample_models/mobilenetv2.circle]
    .venv/bin/python benchmarks/start_bench.py --fresh-venv     # adds (c): a venv and pip install, slow
    .venv/bin/python benchmarks/start_bench.py --importtime     # memplan's 15 slowest imports

The machine's load average is printed: on a shared machine the times move with it; the ratios,
measured alternately in one run, much less. CPU seconds (user + system) of each child are printed
too: they move least with the load (onert's include its whole process: interpreter and imports).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
# what a user's shell has: byte code cached (a PYTHONDONTWRITEBYTECODE=1 environment recompiles
# every changed module on every run, which no installed copy does)
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
TARGET_TIME, TARGET_RSS, TARGET_FIRST = 0.35, 0.10, 1.5

# onert's side: load + compile for training, timed inside the child (imports excluded)
ONERT_CHILD = r"""
import json, sys, time
from onert.experimental.train import session, optimizer, losses
path, batch, opt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0, c0 = time.perf_counter(), time.process_time()
s = session(path, "train")
o = optimizer.Adam(0.001) if opt == "adam" else optimizer.SGD(0.001)
s.compile(optimizer=o, loss=losses.MeanSquaredError(), batch_size=batch)
print("@@DONE " + json.dumps({"load_compile_s": time.perf_counter() - t0,
                             "load_compile_cpu_s": time.process_time() - c0}), flush=True)
"""


def measure(argv: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, int, str, float]:
    """(wall seconds, peak RSS in bytes, stdout, CPU seconds: user + system) of one child process. The child is reaped with
    os.wait4, which gives that child's own high-water mark (ru_maxrss, KiB on Linux);
    getrusage(RUSAGE_CHILDREN) would give the largest over every child so far."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdout=out, stderr=err, env=env or CHILD_ENV, cwd=cwd, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(argv[:3])} ... failed ({p.returncode}): {err.read().strip()[-500:]}")
        return wall, ru.ru_maxrss * 1024, out.read(), ru.ru_utime + ru.ru_stime


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def memplan_cmd(venv_bin: pathlib.Path, model: str) -> list[str]:
    return [str(venv_bin / "memplan"), "analyze", model, "-b", "10", "-O", "adam", "-p", "onert", "-f", "json"]


def importtime(venv_bin: pathlib.Path, model: str) -> None:
    """memplan's slowest imports (self + cumulative microseconds), from `python -X importtime`."""
    code = ("import sys; from memplan_cli.cli import main; "
            f"sys.argv = {['memplan'] + memplan_cmd(venv_bin, model)[1:]!r}; main()")
    p = subprocess.run([str(venv_bin / "python"), "-X", "importtime", "-c", code], capture_output=True,
                       text=True, cwd=ROOT, env=CHILD_ENV)
    rows = []
    for ln in p.stderr.splitlines():
        if not ln.startswith("import time:") or "self [us]" in ln:
            continue
        self_us, cum_us, name = (x for x in ln.split(":", 1)[1].split("|", 2))
        rows.append((int(cum_us), int(self_us), name.rstrip()))
    # top-level and second-level imports only (deeper ones are inside those)
    top = sorted((r for r in rows if len(r[2]) - len(r[2].lstrip()) <= 3), reverse=True)[:15]
    print("slowest imports (cumulative ms, self ms):")
    for cum, own, name in top:
        print(f"  {cum / 1000:8.1f} {own / 1000:8.1f}  {name}")


def fresh_venv(python: str) -> dict:
    """(c): a new venv, `pip install` of this checkout, then the README's first command twice."""
    with tempfile.TemporaryDirectory(prefix="memplan_fresh_") as tmp:
        venv = pathlib.Path(tmp) / "venv"
        t0 = time.perf_counter()
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        # a copy of the package, not an editable install: the checkout's __pycache__ (and any JIT
        # cache there) must not make the first run look warm
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(ROOT)], check=True, env=CHILD_ENV)
        install_s = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
        cmd = [str(venv / "bin" / "memplan"), "analyze", "sample_models/mnist.circle"]
        first = measure(cmd, cwd=str(ROOT))
        second = measure(cmd, cwd=str(ROOT))
        # a second fresh start elsewhere would need a second install; the first run is what counts
        return {"install_s": install_s, "venv_bytes": size, "first_s": first[0], "first_rss": first[1],
                "second_s": second[0], "second_rss": second[1]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="sample_models/mobilenetv2.circle")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fresh-venv", action="store_true", help="also (c): slow, creates a venv and installs")
    ap.add_argument("--importtime", action="store_true", help="print memplan's slowest imports")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    a = ap.parse_args()
    venv_bin = pathlib.Path(sys.executable).parent
    model = a.model
    onert_argv = [sys.executable, "-c", ONERT_CHILD, str(ROOT / model), "10", "adam"]
    if subprocess.run([sys.executable, "-c", "import onert.experimental.train"], capture_output=True).returncode:
        print(f"onert is not importable from {sys.executable}: nothing to compare against", file=sys.stderr)
        return 2
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {a.repeat} runs each, alternating")
    # one warm-up of each (page cache, pyc files), not counted
    measure(memplan_cmd(venv_bin, model), cwd=str(ROOT))
    measure(onert_argv)
    m_wall, m_rss, m_cpu, o_lc, o_lc_cpu, o_wall, o_rss, o_cpu = [], [], [], [], [], [], [], []
    for _ in range(a.repeat):
        w, r, out, c = measure(memplan_cmd(venv_bin, model), cwd=str(ROOT))
        json.loads(out)  # the report is whole
        m_wall.append(w)
        m_rss.append(r)
        m_cpu.append(c)
        w, r, out, c = measure(onert_argv)
        o_cpu.append(c)
        done = [ln for ln in out.splitlines() if ln.startswith("@@DONE ")]
        if not done:
            raise SystemExit("onert did not finish compiling")
        d = json.loads(done[0][7:])
        o_lc.append(d["load_compile_s"])
        o_lc_cpu.append(d["load_compile_cpu_s"])
        o_wall.append(w)
        o_rss.append(r)
    fig = {"model": model, "repeat": a.repeat, "load_average": os.getloadavg()[0],
           "memplan_wall_s": statistics.median(m_wall), "memplan_peak_rss": max(m_rss),
           "onert_load_compile_s": statistics.median(o_lc), "onert_wall_s": statistics.median(o_wall),
           "onert_peak_rss": max(o_rss), "memplan_cpu_s": statistics.median(m_cpu),
           "onert_cpu_s": statistics.median(o_cpu), "onert_load_compile_cpu_s": statistics.median(o_lc_cpu)}
    fig["time_ratio"] = fig["memplan_wall_s"] / fig["onert_load_compile_s"]
    fig["cpu_ratio"] = fig["memplan_cpu_s"] / fig["onert_load_compile_cpu_s"]
    fig["rss_ratio"] = fig["memplan_peak_rss"] / fig["onert_peak_rss"]
    print(f"(a) memplan analyze {model} -b 10 -O adam -p onert -f json, whole process: "
          f"{fig['memplan_wall_s'] * 1000:.0f} ms ({fig['memplan_cpu_s'] * 1000:.0f} ms CPU), "
          f"peak RSS {mib(fig['memplan_peak_rss'])}")
    print(f"(b) onert 0.1.0 load + compile (train, b10, adam): {fig['onert_load_compile_s'] * 1000:.0f} ms "
          f"inside the process, {fig['onert_load_compile_cpu_s'] * 1000:.0f} ms CPU ("
          f"whole process {fig['onert_wall_s'] * 1000:.0f} ms, {fig['onert_cpu_s'] * 1000:.0f} ms CPU), "
          f"peak RSS {mib(fig['onert_peak_rss'])}")

    def verdict(x, target):
        return "meets" if x <= target else "MISSES"

    print(f"time: memplan whole process / onert load + compile = {fig['time_ratio']:.3f} x "
          f"(target <= {TARGET_TIME}: {verdict(fig['time_ratio'], TARGET_TIME)})")
    print(f"CPU:  memplan whole process / onert load + compile = {fig['cpu_ratio']:.3f} x "
          f"(the same target; CPU time moves least with the machine's load)")
    print(f"RSS:  memplan / onert = {fig['rss_ratio']:.3f} x (target <= {TARGET_RSS}: "
          f"{verdict(fig['rss_ratio'], TARGET_RSS)})")
    if a.fresh_venv:
        fv = fresh_venv(sys.executable)
        fig["fresh_venv"] = fv
        print(f"(c) fresh venv: pip install {fv['install_s']:.1f} s, venv {mib(fv['venv_bytes'])}; "
              f"`memplan analyze sample_models/mnist.circle` first run {fv['first_s']:.2f} s "
              f"(peak RSS {mib(fv['first_rss'])}), second run {fv['second_s']:.2f} s "
              f"(target first run <= {TARGET_FIRST} s: {verdict(fv['first_s'], TARGET_FIRST)})")
    if a.importtime:
        importtime(venv_bin, model)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(fig, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
