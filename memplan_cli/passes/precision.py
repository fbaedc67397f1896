"""The step's dtypes under `--precision` (PyTorch Lightning's names; config.PRECISIONS).

Two passes, both no-ops at 32-true (so its figures stay what they were):

- `PrecisionDtypes` (after LossInsertion, before any tensor exists) retypes the forward graph's float32
  operands. N-true: every one takes the low dtype (model, inputs and label converted, as
  `model.to(dtype)` and Lightning's input conversion do). N-mixed: parameters, graph inputs and labels
  stay float32; each op's float outputs take the dtype of its autocast policy (`OpDef.autocast`, one
  fact per op family: PyTorch's CPU autocast lists in aten/src/ATen/autocast_mode.cpp): "lower" ops
  compute in the low dtype, "fp32" ops in float32, "first" ops keep input 0's dtype, "fixed" ops the
  file's, and the rest follow type promotion over their float inputs (a rank-0 input promotes only
  when every input is rank 0, as a Python scalar or 0-dim tensor does in PyTorch). Back-props,
  gradients and optimizer state are then made in their operand's dtype by the later passes: an
  activation's back-prop in the activation's dtype, a float32 weight's gradient and state in float32.
- `CastCopies` (last) adds what a mixed step casts: every step of a "lower" or "fp32" op that reads a
  float input held in another dtype gets an `extra:cast` tensor of that input in the op's dtype (the
  weight copy autocast makes for a convolution or a matmul, the float32 copy of the logits a loss
  computes on), live in that step only: memplan's own plan casts again in backward rather than keep a
  copy from the forward. A "lower" op's own extras (a transposed weight) take the low dtype; with
  16-mixed the gradient scaler's scale (float32) and growth tracker (int32) are optimizer state.
  N-true retypes every float32 extra.
"""
from __future__ import annotations

import copy
from dataclasses import replace

from memplan_cli import ops
from memplan_cli.passes.infra import Pass

FLOAT_WIDTH = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def _is_float(dtype: str) -> bool:
    return dtype in FLOAT_WIDTH


def _low_dtype(cfg) -> str | None:
    """The dtype the step computes in below float32, or None at 32-true (nothing to change)."""
    if getattr(cfg, "precision", "32-true") == "32-true":
        return None
    return cfg.compute_dtype


class PrecisionDtypes(Pass):
    name = "precision-dtypes"
    reads = frozenset({"config"})
    writes = frozenset({"graph"})

    def run(self, tg) -> bool:
        cfg = tg.config
        low = _low_dtype(cfg)
        if low is None:
            return False
        g = tg.graph

        def retype(i: int, dtype: str) -> None:
            if g.operands[i].dtype != dtype:
                g.operands[i] = copy.copy(g.operands[i])
                g.operands[i].dtype = dtype

        if not cfg.mixed:
            for o in list(g.operands):
                if o.dtype == "float32":
                    retype(o.index, low)
            return True
        producer = {i: op for op in g.operations for i in op.outputs if i >= 0}
        for op in g.operations:
            policy = ops.autocast_policy(op)
            if policy == "fixed":
                continue
            if policy == "bias":
                policy = "lower" if self._bias_of_lower(op, g.operands, producer) else ""
            dtype = self._output_dtype(policy, [g.operands[i] for i in op.inputs if i >= 0], low)
            if dtype is None:
                continue
            d = ops.get(op.type)
            keep = set(d.nondiff_outputs) if d is not None else set()  # running statistics stay float32
            for k, i in enumerate(op.outputs):
                if i >= 0 and k not in keep and _is_float(g.operands[i].dtype) and g.operands[i].dtype != "float64":
                    retype(i, dtype)
        return True

    @staticmethod
    def _bias_of_lower(op, operands, producer) -> bool:
        """Whether `op` adds a bias constant (its family's `bias_inputs`) to a cast-down op's output."""
        d = ops.get(op.type)
        bias = d.bias_inputs(op, operands) if d is not None and callable(d.bias_inputs) else ()
        if len(bias) != 1 or len(op.inputs) != 2:
            return False
        other = producer.get(op.inputs[1 - bias[0]])
        return other is not None and ops.autocast_policy(other) == "lower"

    @staticmethod
    def _output_dtype(policy: str, inputs, low: str) -> str | None:
        if policy == "lower":
            return low
        if policy == "fp32":
            return "float32"
        floats = [o for o in inputs if _is_float(o.dtype)]
        if not floats:
            return None
        if policy == "first":
            return inputs[0].dtype if inputs and _is_float(inputs[0].dtype) else None
        ranked = [o for o in floats if len(o.shape) > 0] or floats
        widest = max(ranked, key=lambda o: FLOAT_WIDTH[o.dtype]).dtype
        return widest


class CastCopies(Pass):
    name = "cast-copies"
    reads = frozenset({"config", "graph", "fwd", "aliases"})
    writes = frozenset({"tensors", "extras", "steps", "persistent"})

    def run(self, tg) -> bool:
        cfg = tg.config
        low = _low_dtype(cfg)
        if low is None:
            return False
        if not cfg.mixed:
            for t in tg.tensors:
                if t.category == "extra" and t.dtype == "float32":
                    tg.tensors[t.id] = replace(t, dtype=low)
            return True
        g = tg.graph
        groups = tg.groups()
        for k, ids in tg.extras.items():
            if ops.autocast_policy(g.operations[k]) == "lower":
                for t in ids:
                    spec = tg.tensors[t]
                    if spec.dtype == "float32" and len(groups.get(tg.root(t), [t])) == 1:
                        tg.tensors[t] = replace(spec, dtype=low)
        by_tensor = {}  # forward tensor -> the operand it holds
        for o, t in tg.fwd.items():
            by_tensor[t] = o
        for s in list(tg.steps):
            if s.kind not in ("forward", "calcGradient", "calcDerivative") or s.op is None or s.op < 0:
                continue
            op = g.operations[s.op]
            policy = ops.autocast_policy(op)
            if policy not in ("lower", "fp32"):
                continue
            want = low if policy == "lower" else "float32"
            casts = {}
            for j, i in enumerate(op.inputs):
                if i < 0 or i not in tg.fwd:
                    continue
                t = tg.fwd[i]
                t = s.subst.get(t, t)
                spec = tg.tensors[t]
                if not _is_float(spec.dtype) or spec.dtype == want or t not in s.reads or t in casts:
                    continue
                e = tg.add_tensor(f"#{s.op}:cast{j}@{s.index}", "extra", spec.shape, want, "extra:cast", s.op, None)
                tg.extras[s.op] = [*tg.extras.get(s.op, []), e]
                casts[t] = e
            if casts:  # a new step: a fork of the step (remat/problem.py) shares the old one
                tg.steps[s.index] = replace(s, writes=[*s.writes, *casts.values()], casts=casts)
        if cfg.precision == "16-mixed":
            # torch.amp.GradScaler: `_scale` (float32) and `_growth_tracker` (int32), one element each
            for what, dtype in (("scale", "float32"), ("growth_tracker", "int32")):
                t = tg.add_tensor(f"grad_scaler:{what}", "opt-variable", (1,), dtype, "opt-state")
                tg.persistent.add(t)
        return True
