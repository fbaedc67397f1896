"""Two small stand-in profiles for the report tests, built by hand from the graph's op list.

`FakeMemplan`: one arena for everything (like memplan's own profile). `FakeOnert`: one pool per
category plus a kernel-private pool, and ALLOC lines / ONE-style figures (like the onert profile).
Sizes grow with the batch so sweeps and diffs have something to see; a model with a "Concat" op is
one this fake onert "cannot train" (a MemplanError), to test the n/a path.
"""
from __future__ import annotations

from memplan_cli.buffers import Buffer, BufferList, Pool, Step
from memplan_cli.errors import UnsupportedOpError

KIB = 1024


def _batch(graph) -> int:
    x = graph.operands[graph.inputs[0]]
    return x.shape[0] if x.shape else 1


def schedule(graph) -> list[Step]:
    """Forward steps op by op, then per op in reverse: calcGradient, calcDerivative, applyGradient."""
    ops = graph.operations
    steps = [Step(k, "forward", op.index, op.label) for k, op in enumerate(ops)]
    for op in reversed(ops):
        for kind in ("calcGradient", "calcDerivative", "applyGradient"):
            steps.append(Step(len(steps), kind, op.index, op.label))
    return steps


def buffers(graph, config) -> tuple[list[Buffer], list[Step]]:
    steps = schedule(graph)
    n = len(graph.operations)
    end = len(steps) - 1
    b = _batch(graph)
    bw = {}  # op -> index of its calcGradient step
    for s in steps:
        if s.kind == "calcGradient":
            bw[s.op] = s.index
    out = []
    for op in graph.operations:
        k, lab = op.index, op.label
        act = (k + 1) * KIB * b
        kept_last = bw[k] if k % 2 == 0 else min(k + 1, n - 1)  # even ops keep their output for backward
        out.append(Buffer(f"act{k}", "non-const", act, k, max(k, kept_last), owner=lab))
        if op.type in ("Conv2D", "FullyConnected"):
            w = 4 * KIB * (k + 1)
            out.append(Buffer(f"w{k}", "trainable", w, 0, end, owner=lab))
            out.append(Buffer(f"g{k}", "gradient", w, bw[k], bw[k] + 2, owner=lab))
            for j in range(config.optimizer_state_count):
                out.append(Buffer(f"m{j}_{k}", "opt-variable", w, 0, end, owner=lab))
            out.append(Buffer(f"x{k}", "extra", 512 * b, bw[k], bw[k], owner=lab))
        if k > 0:
            out.append(Buffer(f"bp{k}", "back-prop", act, bw[k] + 1, bw[k - 1] + 1, owner=lab))
    out.append(Buffer("loss_bp", "disposable", 256, n, n + 1, owner=""))
    return out, steps


class FakeMemplan:
    name = "fakememplan"

    def build(self, graph, config, **options):
        bufs, steps = buffers(graph, config)
        return BufferList(bufs, steps, [Pool("arena", "non-const", "naive")])

    def figures(self, analysis):
        return {"note": "fake", "per_layer_extra": {analysis.graph.operations[0].label: {"fwd_mem_tmp": 123}}}


class FakeOnert:
    name = "fakeonert"
    last_options: dict = {}

    def build(self, graph, config, **options):
        if any(op.type == "Concat" for op in graph.operations):
            raise UnsupportedOpError("onert cannot train Concat")
        bufs, steps = buffers(graph, config)
        cats = ("non-const", "trainable", "opt-variable", "back-prop", "gradient", "disposable")
        pools = [Pool(c, c, "naive") for c in cats] + [Pool("kernel", "extra", "naive")]
        moved = [Buffer(x.name, x.category, x.size, x.first, x.last, x.owner,
                        "kernel" if x.category == "extra" else x.category) for x in bufs]
        FakeOnert.last_options = dict(options)
        return BufferList(moved, steps, pools)

    def figures(self, analysis):
        lines = [(p.pool.name, p.plan.arena) for p in analysis.pools]
        one = {"non-const": 0, "trainable": 0, "back-prop": 0, "gradient": 0, "opt variable": 0,
               "disposable": 0, "extra tensors": 0}
        key = {"opt-variable": "opt variable", "extra": "extra tensors"}
        for p in analysis.pools:
            one[key.get(p.pool.category, p.pool.category)] += p.plan.arena
        return {"alloc_lines": lines, "one_style": one}


PROFILE = FakeMemplan()
