"""`--profile torch --precision bf16-mixed`: what `torch.autocast("cpu", dtype=torch.bfloat16)` adds to
eager's step (the replay in profiles/torch/replay.py calls these at a few points; nothing here runs at
32-true or N-true, whose dtypes the precision pass already gave every operand).

Rules (PyTorch's own: aten/src/ATen/autocast_mode.cpp `cached_cast`, derivatives.yaml's `_to_copy`):
- An op on autocast's lower-precision list (`OpDef.autocast == "lower"`; the eager ops the replay
  reads back as one: linear, sdpa) runs on bfloat16 copies of its float32 inputs. A trained weight
  (a leaf that requires grad) is cast once per forward: the copy is cached until the autocast block
  ends (after the loss) and lives on where autograd saved it, until that op's backward. A view of
  one (a tied weight, which the exporter reads through a Transpose) is that weight: eager's linear
  casts the leaf, then transposes the copy. Any other
  input (an activation, a frozen weight, a bias that is no leaf copy) is cast per op, freed after it
  unless saved. The op saves the copy, not the float32 tensor.
- Backward of such an op makes its input's gradient in bfloat16; the `_to_copy` node then makes the
  float32 gradient (the weight's `.grad`), the bfloat16 one freed: both live in that step.
- The loss (autocast's fp32 list) computes on a float32 copy of the bfloat16 logits, freed in the
  op; log_softmax's saved result and backward's gradients are float32, and the logits' gradient is
  cast back to bfloat16.
"""
from __future__ import annotations

from memplan_cli.ir.dtypes import dtype_size

# the eager ops the replay reads back from several IR ops (profiles/torch/facts.py FACTS), by autocast policy
FUSED_LOWER = ("Linear", "SDPA")


def _policy(op) -> str:
    from memplan_cli import ops

    if op.type in FUSED_LOWER:
        return "lower"
    return ops.autocast_policy(op)


class Autocast:
    """The replay's autocast state for one step (inactive unless the precision is N-mixed)."""

    def __init__(self, config, opd, trained):
        self.on = getattr(config, "mixed", False)
        self.low = config.compute_dtype if self.on else "float32"
        self.opd = opd
        self.trained = trained
        self.cache: dict[int, int] = {}  # trained weight -> storage of its cached copy
        self.weight_of = lambda v: v if v in trained else None  # the replay maps views of weights too
        self.cast_inputs: dict[int, list[int]] = {}  # op position -> input positions it cast

    def _low_bytes(self, v) -> int:
        n = 1
        for d in self.opd[v].shape:
            n *= int(d)
        return n * dtype_size(self.low)

    def forward_casts(self, sim, op, p, s, label) -> dict:
        """Copies the op at position `p` computes on: {"in<k>": storage}; made at step `s`."""
        if not self.on or _policy(op) != "lower":
            return {}
        out, cast = {}, []
        for k, v in enumerate(op.inputs):
            if v < 0 or self.opd[v].dtype != "float32":
                continue
            cast.append(k)
            w = self.weight_of(v)
            if w is not None:
                st = self.cache.get(w)
                if st is None:
                    st = self.cache[w] = sim.new(f"{self.opd[w].name}:bf16", "non-const", self._low_bytes(w), s,
                                                 label, "copy")
                out[f"in{k}"] = st
            else:
                out[f"in{k}"] = sim.new(f"{label}:cast{k}", "non-const", self._low_bytes(v), s, label, "copy")
        self.cast_inputs[p] = cast
        return out

    def end_forward(self, sim, loss_step: int) -> None:
        """The autocast block ends after the loss: the cache is cleared (saved copies live on)."""
        for st in self.cache.values():
            sim.touch(st, loss_step)

    def loss_forward(self, sim, x, s, label, c) -> None:
        """The float32 copy of bfloat16 logits `x` the loss computes on, freed in the op."""
        if self.on and self.opd[x].dtype != "float32":
            nb = self._elements(x) * 4
            sim.new(f"{label}:logits_fp32", "extra", nb, s, label, "tmp")
            c["fwd_mem_tmp"] += nb

    def loss_grad_bytes(self, x) -> int:
        """Bytes of nll_loss's and log_softmax's gradients: float32 under autocast."""
        return self._elements(x) * 4 if self.on else self.opd[x].nbytes

    def saved_weight_copies(self, op, p, needs, copies) -> list[int]:
        """The weight copies autograd saves: a cast constant is saved when another input of the op
        requires grad (that input's gradient is computed from the weight's bfloat16 copy)."""
        from memplan_cli import ops

        d = ops.get(op.type)
        bias = (2,) if op.type == "Linear" else (d.bias_inputs if d is not None and isinstance(d.bias_inputs, tuple)
                                                 else ())
        out = []
        for k in self.cast_inputs.get(p, ()):
            v = op.inputs[k]
            weight = self.opd[v].is_const or self.weight_of(v) is not None
            if k not in bias and weight and any(n for j, n in enumerate(needs) if j != k and not self.opd[op.inputs[j]].is_const):
                out.append(copies[f"in{k}"])
        return out

    def loss_backward_tmps(self, sim, x, s, label) -> list[int]:
        """log_softmax's float32 gradient, before the cast back to the logits' bfloat16."""
        if not self.on or self.opd[x].dtype == "float32":
            return []
        return [sim.new(f"{label}:log_softmax_grad", "back-prop", self._elements(x) * 4, s, label, "tmp")]

    def after_loss_backward(self, sim, x, op, s, gx, tmp) -> int:
        """The logits' (`x`) `_to_copy` node runs after the loss's backward (nll_loss's gradient freed by
        then): the bfloat16 gradient is made there, beside log_softmax's float32 one. Returns the step
        the loss's backward of `x` ends in."""
        if not self.on or self.opd[x].dtype == "float32":
            return s
        s_cast = sim.step("calcDerivative", op.index, op.label)
        sim.store[gx]["first"] = s_cast
        sim.touch(gx, s_cast)
        for t in tmp:
            if sim.store[t]["name"].endswith(":log_softmax_grad"):
                sim.touch(t, s_cast)
        return s_cast

    def after_backward(self, sim, op, p, s, needs, made, tmp) -> int:
        """The `_to_copy` nodes of the op's cast inputs run next, in a step of their own (the op's saved
        tensors are freed by then): each makes its input's float32 gradient from the bfloat16 one the op
        made. Returns the op's last step."""
        cast = [k for k in self.cast_inputs.get(p, ()) if needs[k]]
        if not cast:
            return s
        s_cast = sim.step("calcGradient", op.index, op.label)
        names = {f"{self.opd[op.inputs[k]].name}:grad" for k in cast}
        for m in made:
            if sim.store[m]["name"] in names and sim.store[m]["first"] <= s:
                sim.store[m]["first"] = sim.store[m]["last"] = s_cast
        for k in cast:
            v = op.inputs[k]
            t = sim.new(f"{self.opd[v].name}:grad_bf16", "disposable", self._low_bytes(v), s, op.label, "tmp")
            sim.touch(t, s_cast)
            tmp.append(t)
        return s_cast

    def _elements(self, v) -> int:
        n = 1
        for d in self.opd[v].shape:
            n *= int(d)
        return n
