"""Test helpers: a hand-built training graph (FC with fused ReLU, MSE loss, SGD) and a tiny
first-fit placement, so the executor is tested without the pass pipeline or the planners."""
from __future__ import annotations

import numpy as np

from memplan_cli.config import TrainConfig
from memplan_cli.execute.memory import Layout, Placement
from memplan_cli.ir.graph import Graph, Operand, Operation
from memplan_cli.passes.training_graph import TrainingGraph


def fc_relu_mse(batch=4, n_in=6, n_out=5, optimizer="sgd"):
    """x[B,I] -> FC(w[O,I], b[O], RELU) -> y[B,O] -> Loss(mse, label) -> loss; one SGD step.

    Steps: 0 forward FC, 1 forward Loss, 2 calcDerivative Loss (dy), 3 calcGradient FC (dy through
    the ReLU in place, dw, db), 4 applyGradient FC.
    """
    ops = [Operand(0, "x", (batch, n_in), is_input=True), Operand(1, "w", (n_out, n_in), is_const=True),
           Operand(2, "b", (n_out,), is_const=True), Operand(3, "y", (batch, n_out)),
           Operand(4, "label", (batch, n_out), is_input=True), Operand(5, "loss", (1,), is_output=True)]
    g = Graph(ops, [Operation(0, "FullyConnected", [0, 1, 2], [3], {"activation": "RELU"}),
                    Operation(1, "Loss", [3, 4], [5], {"loss": "mse"})], [0, 4], [5])
    tg = TrainingGraph(g, TrainConfig(batch_size=batch, optimizer=optimizer, loss="mse"))
    x = tg.add_tensor("x", "non-const", (batch, n_in), "float32", "input", None, 0)
    w = tg.add_tensor("w", "trainable", (n_out, n_in), "float32", "weight", None, 1)
    b = tg.add_tensor("b", "trainable", (n_out,), "float32", "weight", None, 2)
    y = tg.add_tensor("y", "non-const", (batch, n_out), "float32", "activation", 0, 3)
    lab = tg.add_tensor("label", "non-const", (batch, n_out), "float32", "label", None, 4)
    loss = tg.add_tensor("loss", "non-const", (1,), "float32", "loss", 1, 5)
    dy = tg.add_tensor("y:bp", "back-prop", (batch, n_out), "float32", "back-prop", 0, 3)
    dw = tg.add_tensor("w:grad", "gradient", (n_out, n_in), "float32", "gradient", 0, 1)
    db = tg.add_tensor("b:grad", "gradient", (n_out,), "float32", "gradient", 0, 2)
    tg.fwd.update({0: x, 1: w, 2: b, 3: y, 4: lab, 5: loss})
    tg.bp[3] = dy
    tg.grad.update({1: dw, 2: db})
    tg.contributions[(1, 3)] = dy
    tg.fed.update({x, lab})
    tg.persistent.update({w, b})
    tg.loss_op, tg.label = 1, 4
    tg.add_step("forward", 0, [x, w, b], [y])
    tg.add_step("forward", 1, [y, lab], [loss])
    tg.add_step("calcDerivative", 1, [y, lab], [dy])
    tg.add_step("calcGradient", 0, [y, dy, x], [dy, dw, db])
    states = []
    for v, t, shape in ((1, w, (n_out, n_in)), (2, b, (n_out,))):
        tg.opt_state[v] = [tg.add_tensor(f"{tg.tensors[t].name}:{k}", "opt-variable", shape, "float32", "opt-state",
                                         0, v) for k in ("m", "v")[:tg.config.optimizer_state_count]]
        states += tg.opt_state[v]
    tg.persistent.update(states)
    tg.add_step("applyGradient", 0, [dw, w, db, b] + states, [w, b] + states)
    return tg


def first_fit(tg, align=16) -> Layout:
    """Largest-first first-fit of the training graph's buffers into one pool (exact, no slack)."""
    bl = tg.to_buffer_list(align=align)
    by_name = {tg.buffer_name(t.id): tg.root(t.id) for t in tg.tensors}
    placed, placements = [], {}
    for b in sorted(bl.buffers, key=lambda b: (-b.size, b.first, b.name)):
        busy = sorted((o, o + s) for o, s, f, l in placed if not (l < b.first or b.last < f))
        off = 0
        for lo, hi in busy:
            if off + b.size <= lo:
                break
            off = max(off, hi)
        placed.append((off, b.size, b.first, b.last))
        placements[by_name[b.name]] = Placement(b.name, "arena", off, b.size, b.first, b.last, b.category)
    arena = max((o + s for o, s, _, _ in placed), default=0)
    return Layout(placements, {"arena": arena}, "test")


def with_placement(layout: Layout, root: int, **changes) -> Layout:
    """A copy of `layout` with one placement changed (fault injection)."""
    from dataclasses import replace

    pl = dict(layout.placements)
    pl[root] = replace(pl[root], **changes)
    arenas = dict(layout.arenas)
    p = pl[root]
    arenas[p.pool] = max(arenas[p.pool], p.offset + p.size)
    return Layout(pl, arenas, layout.profile)


def run_backward(tg, feeds: dict, backward: bool = True, seed: int = 0):
    """Run the training graph's steps (no applyGradient) with one allocation per tensor and return
    the memory: forward only when `backward` is False. `feeds` ({tensor id: array}) replaces the
    seeded value of a source tensor (a weight, the input, the label)."""
    from memplan_cli.execute.executor import SOURCE_ROLES, _Inputs
    from memplan_cli.execute.memory import SeparateMemory
    from memplan_cli.execute.ops import StepContext, run_step

    mem, src, state = SeparateMemory(tg), _Inputs(tg, seed), {}
    first, _ = tg.accesses()
    sources: dict[int, list[int]] = {}
    for t, s in first.items():
        if tg.tensors[t].role in SOURCE_ROLES or t in tg.fed or t in tg.persistent:
            sources.setdefault(s, []).append(t)
    for s in tg.steps:
        if s.kind == "applyGradient" or (not backward and s.kind != "forward"):
            continue
        for t in sources.get(s.index, []):
            v = feeds.get(t)
            mem.storage(t)[...] = src.value(t, mem.view(t).dtype) if v is None else v
        run_step(StepContext(tg, s, mem, "sgd", 0.0, state=state))
    return mem


def finite_difference_check(tg, values: dict, targets: list, samples: int, h: float) -> int:
    """backward's result against the loss's central difference: for each (tensor, where backward
    writes its gradient or back-prop) of `targets`, up to `samples` elements of the tensor's value in
    `values` ({tensor id: array}), each nudged by +-h; returns how many elements were checked."""
    loss_t = next(t.id for t in tg.tensors if t.role == "loss")
    mem = run_backward(tg, values)
    got = {t: np.array(mem.view(g)) for t, g in targets}
    rng = np.random.default_rng(1)
    checked = 0
    for t, _ in targets:
        p = values[t].reshape(-1)
        for k in rng.choice(p.size, size=min(p.size, samples), replace=False):
            old = p[k]
            p[k] = old + h
            a = run_backward(tg, values, backward=False).view(loss_t).reshape(-1)[0]
            p[k] = old - h
            b = run_backward(tg, values, backward=False).view(loss_t).reshape(-1)[0]
            p[k] = old
            num, ana = (a - b) / (2 * h), got[t].reshape(-1)[k]
            assert abs(num - ana) <= 1e-6 * max(1.0, abs(num)), (tg.tensors[t].name, int(k), num, ana)
            checked += 1
    return checked
