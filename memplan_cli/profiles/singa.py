"""`--profile singa`: training memory with no offline plan, as Apache SINGA's graph runtime gets it.

SINGA (PR #626, "SINGA-505 Computational graph with memory optimization", shared/seeds) buffers
every operation of one training iteration into a graph, then runs it repeatedly. Memory is not
planned: a block is allocated lazily when an operation first uses it and is recycled when its
reference count drops to zero, i.e. after its last reader in the buffered graph
(`src/core/scheduler/scheduler.cc`: a block written by one node and read later, `kInter`, is freed
after the node that reads it last; blocks only read, `kInput`, or read then written, `kParam`, are
never freed). That is the same liveness as memplan's training graph, so this profile is memplan's
pass pipeline with SINGA's saving rules, and one pool served online by the `singa` planner (first
fit over the free blocks in address order, coalescing on free; planners/singa.py). The arena is the
pool's high-water mark: the figure a runtime reaches without planning.

Rules, with where each comes from (SINGA sources: `python/singa/autograd.py`, `opt.py`,
`src/core/tensor/tensor.cc`, `src/core/scheduler/scheduler.cc`, cnmem's `cnmem.cpp`):
- No in-place kernels (`Policy.inplace` off): every autograd operator returns a new tensor
  (`singa.ReLU(x)`, `ReLUBackward(dy, x)`, `Mult`, `GpuConvBackwardx`, ...). A fused activation is a
  separate operator in SINGA, so its derivative goes to a new |Y| tensor.
- No ReLU masks (`relu_mask` off) and what an activation keeps: `ReLU` keeps its *input* for
  `ReLUBackward(dy, x)`, `Clip` (ReLU6) keeps a float mask of |x| made in forward, `Tanh` / `Sigmoid`
  keep their output. For an op with a fused ReLU-family activation that is one |Y| float tensor
  (the pre-activation, or the mask) kept from forward to the op's backward instead of Y.
- Pooling keeps its input and its output (`_Pooling2d.forward`: `self.cache = (x, y)`), no argmax.
- Reshape / Flatten share the block (`Reshape(in, s)`: `Tensor out(in)`, ref count + 1): kept
  (`alias_reshape` on). Add keeps only shapes (`add_keeps_nothing` on) and returns dy itself as
  both inputs' back-prop; memplan's graph lets one of them take over dY (its aliasing pass gives a
  buffer one writer), so a same-shape Add costs one |Y| copy SINGA does not make.
- Matmul backward multiplies `DefaultTranspose` views (no copy): no transposed extras.
- Back-prop accumulation at a branch point adds into the first contribution (`dxs_[y_idx] += dx`):
  `accumulate_in_place` on.
- Every operator's backward computes dx for all its inputs, the graph input's too (the first
  layer's dx is made and dropped): `input_backprop` on. The label is a constructor argument of
  SINGA's losses, not an input, so it gets none.
- Gradients: `autograd.backward` is a generator that yields (param, grad) as soon as a parameter's
  gradient is complete, and the optimizer updates it in the loop body, so each gradient is freed right
  after its update (`apply_immediately` on). Optimizer state (momentum 1, Adam 2 per parameter) only
  for the parameters that get gradients, never freed (read then written: `kParam`).
- Blocks the Python side still holds are not freed (`graph_ref_ == ref_count()` fails): weights and
  optimizer state, the input and label tensors fed each iteration (whole step), and the model output
  and the loss returned to the caller (live until the end of the step).
- Sizes: cnmem, SINGA's CUDA memory pool, rounds every allocation up to 512 bytes
  (CNMEM_GRANULARITY); option `align` changes it.
- Known ops (each op family's `profiles["singa"]`, memplan_cli/ops/): an op without a SINGA operator the
  profile models is refused with the op named (`refusal`), never given memplan's rule silently.
Not modelled: cuDNN / im2col workspaces, the optimizer's temporaries, the MSE loss reusing its error
tensor as dx; cnmem picks the best-fitting free block where the `singa` planner takes the first
(`--planner` plans the same lifetimes with any other planner).

Its `figures` hook reports the pool's high-water mark and its fragmentation: high-water / lower
bound, the lower bound being the peak of live bytes under these lifetimes (what a perfect plan of
the same buffers needs). 1.0 means the online allocator lost nothing.
"""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.buffers import Pool
from memplan_cli.check.schedule import check_schedule
from memplan_cli.errors import ConfigError, UnsupportedOpError
from memplan_cli.passes.pipeline import build_training_graph
from memplan_cli.passes.policy import Policy
from memplan_cli.passes.rules import ExtraRequest, FORWARD_TO_BACKWARD, default_rules
from memplan_cli.planners import planner_names
from memplan_cli.profiles.memplan import peak_figures

RELU_FAMILY = ("RELU", "RELU6", "RELU_N1_TO_1")
DEFAULT_ALIGN = 512  # cnmem's CNMEM_GRANULARITY
PLANNER = "singa"


def policy():
    """The memplan saving rules SINGA has (see the module docstring)."""
    return Policy(inplace=False, alias_reshape=True, add_keeps_nothing=True, input_backprop=True,
                  transpose_extras=False, opt_state_all_constants=False, accumulate_in_place=True,
                  maxpool_recompute=False, relu_mask=False, apply_immediately=True,
                  cheap_recompute=False, broadcast_views=False)


# ---- per-op rules: memplan's, with what SINGA's operators keep ----------------------------------

def _fused_act(op) -> str:
    return (op.attrs.get("activation") or "NONE").upper()


def _wrap(base):
    def rule(op, ctx):
        r = base(op, ctx)
        _keep_pre_activation(op, ctx, r)
        return r
    rule.__name__ = f"singa_{getattr(base, '__name__', 'rule')}"
    return rule


def _keep_pre_activation(op, ctx, rule) -> None:
    """A fused ReLU / ReLU6 is a separate SINGA operator that keeps its input (ReLU) or a float mask
    (Clip): one |Y| float tensor from the op's forward to its backward, read where memplan reads Y."""
    act = _fused_act(op)
    steps = rule.backward_steps()
    if act not in RELU_FAMILY or not steps or len(op.outputs) != 1 or op.index not in ctx.tg.backward_ops:
        return
    y = op.outputs[0]
    if not any(("fwd", y) in s.reads for s in steps):
        return
    o = ctx.operand(y)
    k = len(rule.extras)
    rule.extras.append(ExtraRequest("relu_input" if act == "RELU" else "clip_mask", tuple(o.shape),
                                    "float32", FORWARD_TO_BACKWARD))
    rule.forward.writes.append(("extra", k))
    for s in steps:
        s.reads = [("extra", k) if r == ("fwd", y) else r for r in s.reads]


# op type -> SINGA's autograd operator (python/singa/autograd.py) this profile models it as: each op
# family declares its own, `profiles["singa"] = {"operator": name}` when memplan's rule keeps what that
# operator keeps, plus `"rule": fn(op, ctx)` for SINGA's own (memplan_cli/ops/); every other op is
# refused (what SINGA's operator keeps for backward is not modelled).


def _facts(op_type: str) -> dict | None:
    f = ops.profile_facts("singa", op_type)
    return f if f is not None and f.get("operator") else None


def refusal(graph) -> str | None:
    """The first op without a SINGA operator this profile models, or a fused activation SINGA's
    operators do not have; None when every op is known."""
    for op in graph.operations:
        if _facts(op.type) is None:
            return (f"singa profile: op {op.label} ({op.type}) has no SINGA autograd operator memplan "
                    f"models (what it keeps for backward is unknown)")
        act = _fused_act(op)
        if act not in ("NONE", "TANH", "SIGMOID") + RELU_FAMILY:
            return f"singa profile: op {op.label} has a fused activation {act} SINGA has no operator for"
    return None


def rules() -> dict:
    """op type -> rule: memplan's defaults with SINGA's overrides, each wrapped for fused ReLUs."""
    table = default_rules()

    for t, d in ops.all_ops().items():  # SINGA's own rule, where a registry op declares one
        f = (d.profiles or {}).get("singa") or {}
        if f.get("rule") is not None:
            table[t] = f["rule"]
    return {t: _wrap(f) for t, f in table.items()}


# ---- the profile ----------------------------------------------------------------------------

class SingaProfile:
    name = "singa"
    precisions = ("32-true",)
    precision_note = "modelled for float32 training only"
    checked = "modelled from SINGA's design (its source), not matched against the library"
    OPTIONS = ("align", "planner")

    def training_graph(self, graph, config, **options):
        """The TrainingGraph behind `build`, with SINGA's whole-step blocks (inputs, label, model
        output) marked."""
        bad = sorted(set(options) - set(self.OPTIONS))
        if bad:
            raise ConfigError(f"unknown singa profile option {bad[0]!r} (known: {', '.join(self.OPTIONS)})")
        why = refusal(graph)
        if why:
            raise UnsupportedOpError(why)
        tg = build_training_graph(graph, config, policy=policy(), rules=rules())
        g = tg.graph
        # a fused ReLU's input is the op's own output in SINGA (an activation, not a kernel buffer)
        for t in tg.tensors:
            if t.role == "extra:relu_input":
                t.category = "non-const"
        # fed from outside each iteration and held by Python: the whole step
        for i in g.inputs:
            if i in tg.fwd:
                tg.persistent.add(tg.fwd[i])
        # the model outputs are returned to the caller with the loss: alive to the end of the step
        if tg.loss_op is not None:
            for y_pred in g.operations[tg.loss_op].inputs[0::2]:
                if y_pred in tg.fwd:
                    tg.live_out.add(tg.fwd[y_pred])
        return tg

    def build(self, graph, config, **options):
        """BufferList for one training step: one pool planned online by the `singa` planner.
        Options: `align` (bytes, default 512: cnmem's granularity), `planner` (another planner
        for the same lifetimes)."""
        tg = self.training_graph(graph, config, **options)
        align = int(options.get("align", DEFAULT_ALIGN))
        if align < 1:
            raise ConfigError(f"singa profile: align must be >= 1, got {align}")
        planner = options.get("planner") or PLANNER
        if planner not in planner_names():
            raise ConfigError(f"unknown planner {planner!r} (known: {', '.join(planner_names())})")
        bl = tg.to_buffer_list(pools=[Pool("pool", "non-const", planner)], align=align)
        check_schedule(tg, bl)
        bl.info.update({"profile": self.name, "planner": planner, "align": align, "steps": len(tg.steps)})
        return bl

    def figures(self, analysis) -> dict:
        """The pool's high-water mark and its fragmentation (high-water / lower bound)."""
        p = analysis.pools[0]
        hw, lb = p.plan.arena, p.lower_bound
        out = {"singa": {"high_water": hw, "lower_bound": lb,
                         "fragmentation": round(hw / lb, 6) if lb else 1.0,
                         "lost_bytes": hw - lb, "allocations": len(p.buffers), "planner": p.plan.planner}}
        out.update(peak_figures(analysis.buffers))
        return out


PROFILE = SingaProfile()
