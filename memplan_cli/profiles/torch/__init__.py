"""`--profile torch`: the bytes PyTorch eager holds during one training step on CPU.

For an ONNX export of a PyTorch module, replays what eager autograd allocates and frees, tensor by
tensor, in the order it does (shared/research/torch-memory.md says how the figures it targets were
measured: the peak of the CPU allocator's live bytes during the third step, plus what is held
before it). It models PyTorch, not memplan's plan: its facts are its own and never read memplan's
saving rules (the ops' `rule`s, Policy); memplan's pass pipeline only says which weights train (LoRA,
freezing, --trainable-ops) and appends the loss.

Rules (sources: PyTorch's `tools/autograd/derivatives.yaml` for what each op saves, `aten/src/ATen/
native` for what it allocates, `torch/optim/adam.py`, `torch/csrc/autograd/engine.cpp`):
- Held the whole step: every float constant of more than one element (parameters and buffers; a
  scalar constant is a Python number in eager), the input batch, the label (class indices, int64,
  one per row, for `cce`; the output's shape and dtype for `mse`), optimizer state (SGD none,
  momentum one buffer, Adam exp_avg, exp_avg_sq and a 4-byte float32 `step` per trained weight).
- requires_grad flows forward from trained weights; an op none of whose inputs requires grad
  records nothing for backward and its outputs are plain values.
- Forward: each op allocates its outputs (an output no op reads and the graph does not return is an
  exporter artefact, e.g. BatchNorm's running statistics, updated in place in eager: none). Views
  (Reshape of a contiguous tensor, Flatten, Squeeze, Unsqueeze, Identity, Transpose) share their
  input's memory; a Reshape, or a MatMul operand of more than 2 dims, that is a non-contiguous view
  (after Transpose) copies it (a 2-D one, a transposed weight, goes to BLAS as it is). A value is
  freed after its last reader in forward, unless autograd saved it: then after the backward of the
  last op that saved it.
- What each op saves, and the auxiliary tensors it makes, are its family's torch facts
  (`OpDef.profiles["torch"]` in memplan_cli/ops; `FACTS` below for the two eager ops exporters
  split); an op type without torch facts is refused, naming it.
- Exporters split some eager ops; these are read back as the one op eager runs: x * Sigmoid(x) is
  `silu` (saves x), MatMul with a constant weight (or a transposed view of one: a tied weight)
  followed by Add of a constant bias is `linear`.
- Kernel scratch that is no tensor (oneDNN convolution, batch_norm backward) is each family's fact
  too; an op whose kernel makes the input's gradient before the weight's (convolution) gets two
  backward steps.
- Backward runs the ops in reverse order. Each op allocates the gradients of its inputs that
  require grad (a view op or a same-shape Add passes the incoming gradient on without a copy); the
  incoming gradient and the saved tensors are freed after it. A second gradient reaching one value
  is added into the first in place (the engine's InputBuffer) and freed.
- Weight gradients are kept in `.grad` until `optimizer.step()`; `zero_grad(set_to_none=True)` frees
  them after it.
- Optimizer (CPU tensors take the single-tensor path, foreach is for CUDA): SGD and momentum update
  in place; Adam makes `exp_avg_sq.sqrt()` and its quotient per weight, and the previous weight's
  quotient (`denom`) is still alive when the next weight's are made.
- Cross-entropy: log_softmax's result (saved) and two scalars in forward; backward allocates
  nll_loss's and log_softmax's gradients (N x C each). The training loop holds the model's output and
  the loss to the end of the step (`out = model(x); loss = lossfn(out, y)`).
Not modelled, said in `figures`: allocator slack (the figure is live bytes, the allocator's own
count), memory allocated outside PyTorch's allocator (some oneDNN scratch), tensors a module's
Python code keeps longer than its last use (locals live until `forward` returns).

`figures` reports `torch.peak` (bytes) and the split at the peak; `--by-layer` gets ColossalAI's four
columns as eager has them.

Layout: `facts` (what each eager op saves and makes: the families' facts, the split ops' `FACTS`, the
general rule), `fuse` with `attention` and `groupnorm` (the exporters' splits read back as one eager op),
`rewrites` (one small rule each: one aten op written as several nodes, equal ops the exporter merged,
select, lost clones, merged dropouts, sdpa's dropout, fused activations), `functions` (custom autograd
Functions), `strides` and `layout` (views, strides, memory formats), `replay` (held, forward,
backward, optimizer phases), `figures` (the split at the peak, coverage), `refusal`, `autocast`
(--precision N-mixed), `export` (what the dynamo exporter's optimizer folded, put back).
"""
from __future__ import annotations

from memplan_cli.buffers import Buffer, BufferList, Pool
from memplan_cli.errors import ConfigError
from memplan_cli.ops.conv import CPU_NAME
from memplan_cli.profiles.torch.attention import folded_causal_tables
from memplan_cli.profiles.torch.export import eager_graph
from memplan_cli.profiles.torch.facts import ESTIMATED, FACTS, GENERAL, facts
from memplan_cli.profiles.torch.figures import (ESTIMATED_SHARE, PARTS, coverage, coverage_line, part_of,
                                                split_at)
from memplan_cli.profiles.torch.refusal import refusal
from memplan_cli.profiles.torch.replay import replay

__all__ = ["PROFILE", "TorchProfile", "ESTIMATED", "ESTIMATED_SHARE", "FACTS", "GENERAL", "PARTS", "coverage_line",
           "facts", "refusal", "replay"]

PLANNER = "best"


class TorchProfile:
    name = "torch"
    precisions = ("32-true", "bf16-mixed", "bf16-true")
    precision_note = "matched against float32, bf16-mixed (CPU autocast) and bf16-true runs only"
    # how its figures were checked (`memplan compare` prints it)
    checked = ("matched against torch 2.14's CPU allocator and MemTracker on zoos of CNN, vision, transformer "
               "and LoRA exports (devtools/torch_oracle.py; docs/torchprof.md has each figure and what is refused)")
    OPTIONS = ("planner",)

    def checked_for(self, extras: dict) -> str:
        """For this model: how many of its eager ops measured rules cover (not the zoos it was checked on)."""
        cov = (extras.get("torch") or {}).get("coverage")
        return coverage_line(cov) if cov else ""

    def training_graph(self, graph, config):
        """memplan's training graph: only which weights train and the appended loss are read. What the
        dynamo exporter's optimizer folded away is put back first (export.py)."""
        from memplan_cli.passes.pipeline import build_training_graph

        return build_training_graph(eager_graph(graph), config)

    def build(self, graph, config, **options):
        from memplan_cli.planners import planner_names

        bad = sorted(set(options) - set(self.OPTIONS))
        if bad:
            raise ConfigError(f"unknown torch profile option {bad[0]!r} (known: {', '.join(self.OPTIONS)})")
        planner = options.get("planner") or PLANNER
        if planner not in planner_names():
            raise ConfigError(f"unknown planner {planner!r} (known: {', '.join(planner_names())})")
        from memplan_cli.profiles.memplan import peak_step

        tg = self.training_graph(graph, config)
        # a dynamo file's forward-substitution loops read as eager's solve_triangular (replay.as_solves)
        sim, layer = replay(tg, config, as_solve=True)

        def beside(**how) -> int:
            """The peak of the step replayed another way, for a figure reported beside this one."""
            alt = replay(tg, config, **how)[0]
            return max(peak_step(_buffers(alt)[1], len(alt.steps))[1], 0)

        if sim.coverage.get("possible_functions"):
            # formulas a custom autograd Function may have run (TorchScript cannot tell): the figure
            # with each read as one, reported beside the op-by-op one
            sim.coverage["as_functions_peak"] = beside(as_functions=True, as_solve=True)
        if sim.coverage.get("recorded_functions"):
            # custom autograd Functions a dynamo file records, counted as saving only their inputs (their
            # backward is Python code the file lacks): the figure with their ops run one by one, beside
            sim.coverage["as_ops_peak"] = beside(as_solve=True, as_ops=True)
        if sim.coverage.get("regions"):
            # ops inlined from a `with` block the file does not name (no_grad, enable_grad or autocast):
            # the figure with the blocks run under no_grad, reported beside the one with them recorded
            sim.coverage["as_no_grad_peak"] = beside(as_no_grad=True, as_solve=True)
        if sim.coverage.get("solves"):
            # those loops replayed as the file writes them (had eager run the loop): reported beside
            sim.coverage["as_loop_peak"] = beside()
        if sim.coverage.get("held_lines"):
            # tensors made under one recorded source line (a called function's body the file does not
            # record): the figure with each held to that line's last op, reported beside
            sim.coverage["as_held_peak"] = beside(as_solve=True, as_held_lines=True)
        if sim.coverage.get("contiguous_sites"):
            # transposed tensors a TorchScript file's reshape reads as views, where a `.contiguous()` it
            # does not record would have copied: the figure with each copied, reported beside
            names = frozenset(c["tensor"] for c in sim.coverage["contiguous_sites"])
            sim.coverage["as_contiguous_peak"] = beside(as_solve=True, as_contiguous=names)
        if sim.coverage.get("view_sites"):
            # the model's output viewing a larger tensor, a broadcast view handed to several submodules: the
            # figure with each copied (a `.contiguous()` a TorchScript file does not record), beside
            names = frozenset(c["tensor"] for c in sim.coverage["view_sites"])
            sim.coverage["as_copied_peak"] = beside(as_solve=True, as_contiguous=names)
        # position tables read at rows the file fixes, trained by assumption (loaders/params.py
        # fixed_row_tables): eager may keep such a table frozen (a sinusoidal one), and the file does not
        # say which; the figure with them frozen, reported beside
        fixed = fixed_tables_frozen(self, graph, config)
        if fixed:
            sim.coverage["fixed_tables"] = fixed
        # slices of a module's causal table a TorchScript file may have folded (its buffer not in the
        # state dict): the tables, named with the peak had eager held them (attention.py)
        tables = folded_causal_tables(tg.graph)
        if tables:
            sim.coverage["causal_tables"] = tables
        # parameters eager holds that no op of the file reads, sizes unknown (loaders/onnx_loader.py)
        export = graph.export_record()
        # (an unread one that may be a tied parameter read under another name is named apart)
        tied = dict((export or {}).get("tied") or {})
        unread = [t for t in (export or {}).get("unread") or [] if t not in tied]
        if unread:
            sim.coverage["unread_parameters"] = unread
            sim.coverage["unread_modules"] = list(export.get("unread_modules") or ())
        if tied:
            sim.coverage["tied_parameters"] = tied
        # the language part of a composite model: eager also holds the other parts (loaders/onnx_loader.py)
        composite = (getattr(graph, "metadata", None) or {}).get("composite")
        if composite:
            sim.coverage["composite"] = dict(composite)
        kept, bufs = _buffers(sim)
        # the training graph: which weights train (the report's assumed-trainable list reads it);
        # profile_data: what `figures` reads
        return BufferList(bufs, sim.steps, [Pool("heap", "non-const", planner)],
                          {"profile": self.name, "planner": planner, "steps": len(sim.steps)}, training_graph=tg,
                          profile_data={"layers": layer, "parts": [part_of(s, sim.steps) for s in kept],
                                        "coverage": sim.coverage, "lists_parameters": export is not None})

    def figures(self, analysis) -> dict:
        """Eager's peak (live bytes, what its allocator counts), the split there, and the per-layer
        ColossalAI columns."""
        from memplan_cli.profiles.memplan import peak_figures, peak_step

        bl = analysis.buffers
        pf = peak_figures(bl)
        at = pf.get("peak_step", 0)
        parts = bl.profile_data.get("parts", [""] * len(bl.buffers))
        tensors = [b for b, p in zip(bl.buffers, parts) if p != "scratch"]
        t_parts = [p for p in parts if p != "scratch"]
        t_at, t_peak = peak_step(tensors, len(bl.steps))
        t_peak = max(t_peak, 0)
        out = {"torch": {"peak": pf.get("peak_live_bytes", 0), "peak_step": at,
                         "peak_op": pf.get("peak_op", ""), "peak_kind": pf.get("peak_kind", ""),
                         "by_category": pf.get("peak_by_category", {}), "split": split_at(bl.buffers, parts, at),
                         # tensor storages only (MemTracker's view): their own peak and its split
                         "tensors": {"peak": t_peak, "peak_step": t_at, "split": split_at(tensors, t_parts, t_at)},
                         "coverage": coverage(bl, at, pf.get("peak_live_bytes", 0)),
                         # the CPU whose kernels and cache sizes the facts assume (ops/conv.py)
                         "cpu": CPU_NAME,
                         "not_modelled": "allocator slack; memory outside PyTorch's allocator (some oneDNN "
                                         "scratch); tensors module code keeps past their last use; copies "
                                         "the export leaves out (a `.clone()` is no node); the forward's "
                                         "work for results no output reads (both exporters drop it)"
                                         + ("" if bl.profile_data.get("lists_parameters") else
                                            "; parameters no op reads (this file does not list the "
                                            "module's parameters)")}}
        layers = bl.profile_data.get("layers")
        if layers is not None:
            out["per_layer_extra"] = layers
        return out


def fixed_tables_frozen(profile, graph, config) -> dict:
    """The position tables among the weights trained by assumption, read only at rows the file fixes
    (`graph.metadata["fixed_row_tables"]`, loaders/params.py), that this run trains, and the peak with
    them frozen as `--freeze params:NAME` would (a sinusoidal table is a Parameter with
    requires_grad=False in eager, RoFormer's; a learned one trains; the file does not say which):
    {"tables": [...], "peak": bytes}, or {} when there is none or freezing them changes nothing."""
    from dataclasses import replace

    from memplan_cli.profiles.memplan import peak_step

    names = [t for t in (getattr(graph, "metadata", None) or {}).get("fixed_row_tables") or ()
             if f"params:{t}" not in config.freeze]
    if not names:
        return {}
    frozen = replace(config, freeze=tuple(config.freeze) + tuple(f"params:{t}" for t in names))
    try:
        tg = profile.training_graph(graph, frozen)
    except ConfigError:  # a name --freeze does not match (nothing to freeze): no figure beside
        return {}
    alt = replay(tg, frozen, as_solve=True)[0]
    return {"tables": names, "peak": max(peak_step(_buffers(alt)[1], len(alt.steps))[1], 0)}


def _buffers(sim) -> tuple[list, list]:
    """The replay's storages that hold bytes, and each as a Buffer of the one heap pool."""
    kept = [s for s in sim.store if s["bytes"] > 0]
    return kept, [Buffer(s["name"], s["category"], s["bytes"], s["first"], s["last"], s["owner"], "heap", s["bytes"],
                         key=f"{s['category']}:{i}") for i, s in enumerate(kept)]


PROFILE = TorchProfile()
