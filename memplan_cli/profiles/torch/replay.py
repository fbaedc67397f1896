"""The replay of one eager training step: what is held before it, the forward, the backward, the
optimizer, each a phase of `Replay` over the eager ops (`rewrites.eager_ops`). The rules it follows
are the package docstring's."""
from __future__ import annotations

from memplan_cli import ops
from memplan_cli.ops import binary, matmul
from memplan_cli.ops import trilu as trilu_ops
from memplan_cli.errors import UnsupportedOpError
from memplan_cli.ir.dtypes import dtype_size
from memplan_cli.ir.graph import FOLDED_CALLS
from memplan_cli.ops._torch import (GRAD_LAYOUT_KEEPING, LAYOUT_KEEPING, PERMUTE_CALLS, TRANSPOSE, WEIGHT_MATMULS,
                                   parse_call)
from memplan_cli.ops.loss import LOSS_TYPE
from memplan_cli.profiles.torch.attention import computed_in_forward, folded_values, sdpa_masks
from memplan_cli.profiles.torch.autocast import Autocast
from memplan_cli.profiles.torch.constant_layers import constant_layers
from memplan_cli.profiles.torch.export import (ESTIMATED_PARAMS, expand_base_bytes, folded_computations,
                                               folded_lookup_tables, signature_buffers, torchscript_export)
from memplan_cli.profiles.torch.eager_op import EagerOp
from memplan_cli.profiles.torch.facts import ESTIMATED, ESTIMATED_WHY, facts, no_grad
from memplan_cli.profiles.torch.functions import as_functions as as_functions_
from memplan_cli.profiles.torch.functions import (child_below, module_scope, possible_functions, recorded_functions,
                                                  scope_of)
from memplan_cli.profiles.torch.layout import memory_format
from memplan_cli.profiles.torch.refusal import refusal, solved_groups
from memplan_cli.profiles.torch.rewrites import copies_after, eager_ops, floating, same_dtype_casts
from memplan_cli.profiles.torch.sim import Sim
from memplan_cli.profiles.torch.strides import (bmm_copies, channels_last_2d, contiguous_strides, elements,
                                                expanded_strides, is_contiguous, iterator_strides, view_output_strides,
                                                view_strides)


def replay(tg, config, as_functions: bool = False, as_no_grad: bool = False, as_solve: bool = False,
           as_held_lines: bool = False, as_contiguous: frozenset = frozenset(), as_ops: bool = False):
    """Replay one eager training step over `tg.graph`; returns (the simulation, per-layer columns).
    `as_functions`: each written-out formula a TorchScript export may have run inside a custom autograd
    Function is read as one (functions.py), for the figure reported beside the op-by-op one.
    `as_no_grad`: the ops a dynamo export inlined from a `with` block's body run under no_grad.
    `as_solve`: each triangular solve a dynamo file writes as a loop of row writes then `+ eye` and
    matmuls runs as eager's linalg_solve_triangular calls (`as_solves`): the figure; without it, the
    loop as written, the figure reported beside.
    `as_held_lines`: every tensor made by ops a dynamo file records under one source line is held until
    that line's last op (`line_runs`: a called function whose own lines the file does not record holds
    its Python locals until it returns), for the figure reported beside.
    `as_contiguous`: the tensors (by name) a dropped `.contiguous()` may have copied
    (`Replay.dropped_contiguous`), each copied after the op that makes it, for the figure beside.
    `as_ops`: the custom autograd Functions a dynamo export records run op by op, each op saving what
    its own backward needs (what a Function saving its intermediates would hold), for the figure
    beside."""
    return Replay(tg, config, as_functions, as_no_grad, as_solve, as_held_lines, as_contiguous, as_ops).run()


def inlined_regions(g, ops_) -> dict:
    """The ops a dynamo export inlined from the body of a `with torch.no_grad()`, `torch.enable_grad()`
    or `torch.autocast(...)` block (loaders/onnx_loader.py: their recorded stack starts in code torch.fx
    generated): eager-op position -> the block. The file does not say which kind of block it was."""
    inlined = (g.export_record() or {}).get("inlined") or {}
    if not inlined:
        return {}
    out = {}
    for p, op in enumerate(ops_):
        keys = {inlined.get(g.operations[i].name) for i in (op.members or (op.index,))} - {None}
        if keys:
            out[p] = min(keys)
    return out


def alternatives(fn, op, opd, needs) -> tuple:
    """A family's backward size function: (op, operands), or (op, operands, needs) where what backward
    makes depends on which inputs need their gradient (needs[k]: input k requires grad)."""
    return fn(op, opd, needs) if fn.__code__.co_argcount >= 3 else fn(op, opd)


def as_solves(ops_: list, groups: list[list[int]], g, opd: list) -> list:
    """`ops_` with each forward-substitution loop of `groups` (`solved_products`) read back as eager's
    `linalg_solve_triangular` calls (transformers' chunked gated delta rule: `-A.tril(-1)`, the rows
    written in place, `+ eye`, then one matmul per right-hand side): one solve op per matmul, at its
    place, reading the loop's matrix and the matmul's other side, making the matmul's result (ops/trilu.py
    `SOLVE_FACTS`); the loop, the `+ eye` and the matmuls are dropped."""
    at: dict[int, EagerOp] = {}
    drop: set[int] = set()
    for pos in groups:
        add, products = solved_products(ops_, pos, g, opd)
        trilu = ops_[pos[0]]
        members = tuple(x for q in (*pos, add) for x in ops_[q].members)
        for k, q in enumerate(products):
            r = ops_[q]
            attrs = {ESTIMATED: True, ESTIMATED_WHY: SOLVE_WHY, "function": "solve_triangular"}
            at[q] = EagerOp(r.index, trilu_ops.SOLVE_TYPE, [trilu.inputs[0], r.inputs[1]], list(r.outputs), attrs,
                            f"{r.label} [solve_triangular]", (members if k == 0 else ()) + tuple(r.members))
        drop |= set(pos) | {add}
    return [at.get(p, op) for p, op in enumerate(ops_) if p not in drop]


SOLVE_WHY = ("eager's torch.linalg.solve_triangular, which the dynamo export writes as a forward-substitution "
             "loop (transformers' chunked gated delta rule branches on torch.compiler.is_exporting()); had eager "
             "run the loop, it would hold each row's copies instead (the file cannot tell)")


def solved_products(ops_: list, pos: list[int], g, opd: list):
    """Where the loop at `pos` (its first op the Trilu) hands on one matrix T, read by one Add of a
    constant (c, c) identity-sized matrix only, whose sum only matmuls read as their left side, each
    with another right-hand side: (the Add's position, the matmuls' positions); else None."""
    readers: dict[int, list[int]] = {}
    for q, r in enumerate(ops_):
        for v in set(r.inputs):
            readers.setdefault(v, []).append(q)
    inside = set(pos)
    leaving = [v for q in pos for v in ops_[q].outputs
               if v >= 0 and (v in g.outputs or any(r not in inside for r in readers.get(v, ())))]
    if len(leaving) != 1 or leaving[0] in g.outputs:
        return None
    t = leaving[0]
    outside = [r for r in readers.get(t, ()) if r not in inside]
    if len(outside) != 1:
        return None
    add = ops_[outside[0]]
    c = opd[t].shape[-1]
    other = [v for v in add.inputs if v != t]
    if add.type != binary.ADD_TYPE or len(add.inputs) != 2 or len(other) != 1 or not opd[other[0]].is_const \
            or tuple(opd[other[0]].shape)[-2:] != (c, c) or elements(opd[other[0]].shape) != c * c:
        return None
    s = add.outputs[0]
    products = readers.get(s, [])
    if not products or s in g.outputs or any(
            ops_[q].type != matmul.MATMUL_TYPE or len(ops_[q].inputs) != 2 or ops_[q].inputs[0] != s
            or ops_[q].inputs[1] == s for q in products):
        return None
    return outside[0], products


def line_runs(g, ops_) -> tuple[list[list[int]], dict[int, str]]:
    """Runs of two or more consecutive eager ops whose file nodes all record one stack (the dynamo
    exporter's `pkg.torch.onnx.stack_trace`, loaders/onnx_loader.py): one source line as far as the
    file says; a call into a function whose own lines the file does not record (transformers'
    hub-kernel fallbacks) is such a run. Returns the runs and, per first position, the line's code."""
    export = g.export_record() or {}
    lines, text = export.get("lines") or {}, export.get("line_text") or []
    if not lines:
        return [], {}
    runs, cur, key, texts = [], [], None, {}
    for p, op in enumerate(ops_):
        ids = {lines.get(g.operations[i].name) for i in (op.members or (op.index,)) if i < len(g.operations)}
        k = ids.pop() if len(ids) == 1 else None
        if k is not None and k == key:
            cur.append(p)
            continue
        if len(cur) > 1:
            runs.append(cur)
            texts[cur[0]] = text[key] if key < len(text) else ""
        cur, key = ([p], k) if k is not None else ([], None)
    if len(cur) > 1:
        runs.append(cur)
        texts[cur[0]] = text[key] if key < len(text) else ""
    return runs, texts


class Replay:
    """One step's replay: the eager ops, the storages made so far (`sim`), and what each phase tells
    the next (which operands require grad, where each storage was saved, the gradients made)."""

    def __init__(self, tg, config, as_functions: bool = False, as_no_grad: bool = False, as_solve: bool = False,
                 as_held_lines: bool = False, as_contiguous: frozenset = frozenset(), as_ops: bool = False):
        self.tg, self.config = tg, config
        self.as_held_lines = as_held_lines
        g = self.g = tg.graph
        self.uses = g.uses()
        self.opd = list(g.operands)  # plus the operands the rewrites add (rewrites.eager_ops)
        # which weights train, as `held_before` settles them (a computed sdpa mask is no parameter)
        grads = frozenset(tg.grad) - {m for m in sdpa_masks(g) if self.opd[m].assumed}
        self.ops = eager_ops(g, self.uses, self.opd, grads)
        if (getattr(config, "precision", None) or "32-true") == "32-true":
            self.ops = same_dtype_casts(self.ops, self.opd)
        # a loop of row writes solving a triangular system is transformers' export-only stand-in for
        # solve_triangular under dynamo; a TorchScript trace runs eager's branch (its exporter has no
        # solve_triangular), so there the loop is what eager ran
        dynamo = self.dynamo = g.export_record() is not None
        self.torchscript = torchscript_export(g)
        why = refusal(self.ops, self.opd, getattr(g, "source_format", "onnx") or "onnx", written_solves=dynamo)
        if why:
            raise UnsupportedOpError(why)
        self.solves = [pos for pos in solved_groups(self.ops) if solved_products(self.ops, pos, g, self.opd)]
        if as_solve and self.solves:
            self.ops = as_solves(self.ops, self.solves, g, self.opd)
        # the model's outputs: what the loss reads as its predictions (the training graph's own output is
        # the loss), else the graph's outputs
        loss_in = g.operations[tg.loss_op].inputs if tg.loss_op is not None else []
        self.model_outputs = set(loss_in[0:len(loss_in) - 1:2]) or set(g.outputs)
        if as_contiguous:
            self.ops = copies_after(self.ops, self.opd, self.uses,
                                    {k for k, op in enumerate(self.ops) if op.outputs and op.outputs[0] >= 0
                                     and self.opd[op.outputs[0]].name in as_contiguous}, self.model_outputs)
        self.trained = set(tg.grad)
        self.read_functions(as_functions, as_ops)
        self.read_regions(as_no_grad)
        # ops reading a constant the exporter folded from a parameter's computation (export.py)
        folded = self.folded = folded_computations(g)
        # folded values eager holds as an expanded view of a smaller tensor (export.expand_base_bytes)
        expanded = {v for v in folded_values(g, self.trained, sdpa_masks(g)) if expand_base_bytes(self.opd[v])}
        # tensors whose size the loader took under a stated assumption (loaders/data_sized.py): the
        # ops making or reading them are named, so a miss there is
        sized = set(((g.metadata or {}).get("data_sized") or {}).get("tensors") or ())
        for op in self.ops:
            if sized and any(v >= 0 and self.opd[v].name in sized for v in (*op.inputs, *op.outputs)):
                op.attrs[ESTIMATED] = True
            if folded and any(v >= 0 and self.opd[v].is_const and self.opd[v].name in folded for v in op.inputs):
                op.attrs[ESTIMATED] = True
            if any(v in expanded for v in op.inputs):  # which dims the expand broadcast is not recorded
                op.attrs[ESTIMATED] = True
        self.sim = Sim()
        self.ac = Autocast(config, self.opd, self.trained)  # --precision N-mixed: autocast.py
        # eager ops on constants that memplan folded at load (opgraph/fold.py): not replayed; a result
        # an op reads is counted (held, or made at its reader: `folded_values`), the rest is not
        read = {self.opd[v].name for op in g.operations for v in op.inputs if v >= 0}
        self.sim.coverage = {"ops": len(self.ops), "possible_functions": self.possible,
                             "recorded_functions": self.recorded,
                             "regions": self.regions, "solves": len(self.solves),
                             "estimated": {op.label: op.attrs.get("function") or op.type for op in self.ops
                                           if op.attrs.get(ESTIMATED)},
                             "why": {op.label: op.attrs[ESTIMATED_WHY] for op in self.ops
                                     if op.attrs.get(ESTIMATED) and op.attrs.get(ESTIMATED_WHY)},
                             "not_counted": [c for c in g.metadata.get(FOLDED_CALLS) or ()
                                             if not read & set(c["outputs"]) and not _a_view(c["type"])],
                             # trained layers reading a batch-shaped tensor the module made itself
                             "constant_layers": constant_layers(g, self.trained),
                             "cache_sized": {}}
        self.layer: dict[str, dict[str, int]] = {}
        self.storage: dict[int, int] = {}  # operand -> storage
        self.params_order: list[int] = []
        self.held: list[int] = []  # storages held the whole step
        self.computed: set[int] = set()  # folded constants eager computes during forward
        self.ts_computed: set[int] = set()  # those a TorchScript file computes with its own ops
        # forward -> backward
        self.rg: set[int] = set(self.trained)  # operands that require grad
        self.contig: dict[int, bool] = {}
        self.cl: dict[int, bool] = {}  # channels-last memory format (layout.memory_format)
        self.noncontig_in: set[int] = set()  # positions whose input 0 was non-contiguous
        self.strides: dict[int, tuple] = {}  # operand -> strides of a view or a strided result (absent: contiguous)
        self.view_of: dict[int, tuple] = {}  # operand -> (the operand it views, the view op's label, type)
        self.contiguous_sites: dict[int, str] = {}  # views a dropped `.contiguous()` may have copied -> op
        self.output_views: dict[int, str] = {}  # outputs that view a larger tensor (`dropped_contiguous`) -> op
        self.handed_views: dict[int, str] = {}  # broadcast views handed to several submodules (`handed_down`) -> op
        self.node: dict[int, bool] = {}  # eager-op position -> records a backward node
        self.saved_by: dict[int, list] = {}  # position -> storages it saved
        self.fwd_step: dict[int, int] = {}  # position -> its forward step
        self.dying: dict[int, list] = {}  # position of a node nothing runs -> storages it saved
        self.fwd_last: dict[int, int] = {}  # storage -> last forward step reading it
        # backward -> the end of the step
        self.grad: dict[int, int | None] = {}  # operand -> storage of its accumulated gradient
        self.grad_contig: dict[int, bool] = {}  # operand -> its gradient is contiguous
        self.grad_strides: dict[int, tuple] = {}  # operand -> its non-contiguous gradient's strides, where known
        self.grads_of_weights: list[int] = []
        self.view_delivered: dict[int, int] = {}  # a trained weight -> the last step a view's gradient reached it
        self.release_at: dict[int, int] = {}  # storage -> backward step that last needs it

    def read_functions(self, as_functions: bool, as_ops: bool = False) -> None:
        """Custom autograd Functions (functions.py): the ones the dynamo exporter's recorded stack names
        become one Function op each; a written-out formula TorchScript may have run inside one stays
        op by op, named as estimated (`as_functions`: read as Functions too, the figure beside)."""
        g = self.g
        groups, names, loose = recorded_functions(g, self.ops)
        self.recorded = len(groups)
        if as_ops:  # the recorded Functions' ops one by one, still named
            loose |= {q for pos in groups for q in pos}
            groups, names = [], {}
        possible = possible_functions(g, self.ops, self.opd, self.uses, self.trained)
        paths = [scope_of(g.operations[self.ops[pos[0]].index].name) for pos in possible]
        self.possible = [{"module": p, "ops": len(pos)} for p, pos in zip(paths, possible)]
        if as_functions:
            names.update({len(groups) + k: p for k, p in enumerate(paths)})
            groups = groups + possible
        else:
            loose |= {q for pos in possible for q in pos}
        for q in loose:
            self.ops[q].attrs[ESTIMATED] = True
        if groups:
            self.ops = as_functions_(self.ops, groups, g, self.opd, self.uses, names)

    def read_regions(self, as_no_grad: bool) -> None:
        """Ops a dynamo export inlined from a `with` block's body: under torch.no_grad() eager records no
        node for them and their results need no gradient; under autocast (in float32) or enable_grad
        they run as any op. The file does not say which: they run as any op and are named as estimated
        (`as_no_grad`: under no_grad, every read in or out of the block detached, for the figure beside)."""
        regions = inlined_regions(self.g, self.ops)
        self.regions = {"blocks": len(set(regions.values())), "ops": len({self.ops[p].label for p in regions})} \
            if regions else {}
        made = {v for p in regions for v in self.ops[p].outputs}
        for p, op in enumerate(self.ops):
            if p in regions:
                op.attrs[ESTIMATED] = True
            if as_no_grad:
                det = {k for k, v in enumerate(op.inputs) if v >= 0 and (p in regions or v in made)}
                if det:
                    op.attrs["detached"] = tuple(sorted(det | set(op.attrs.get("detached", ()))))

    def run(self):
        self.held_before()
        self.forward()
        self.handed_down()
        if self.contiguous_sites:
            self.sim.coverage["contiguous_sites"] = [{"op": label, "bytes": self.opd[v].nbytes,
                                                      "tensor": self.opd[v].name}
                                                     for v, label in self.contiguous_sites.items()]
        if self.output_views or self.handed_views:
            # views a `.contiguous()` the file does not record would have copied, whose copy changes what
            # lives how long: named apart, with their own figure beside (figures.copied_views_note)
            self.sim.coverage["view_sites"] = [{"op": label, "bytes": self.opd[v].nbytes, "tensor": self.opd[v].name,
                                                "kind": kind}
                                               for kind, views in (("output", self.output_views),
                                                                   ("handed", self.handed_views))
                                               for v, label in views.items()]
        self.held_lines()
        self.backward()
        self.accumulate_view_grads()
        self.lifetimes()
        self.optimizer()
        self.end_of_step()
        return self.sim, self.layer

    def handed_down(self) -> None:
        """A tensor a module's forward makes and hands to two or more of its submodules is kept in a
        local of that forward between the calls (Python frees a frame's locals when it returns): it
        lives until the module's last op, not only to its last reader. MPNet's encoder computes the
        relative position bias once (`compute_position_bias`: `expand(...).contiguous()`) and adds
        it in every layer; eager holds the copy until the encoder returns. A value handed to one call
        only is the loop's `x = layer(x)`, rebound after it. A copy the dynamo exporter dropped
        (`lost_clones`) was made where its input was."""
        g, ops_ = self.g, self.ops
        defs = g.defs()
        scopes = []
        for op in ops_:
            irop = g.operations[op.index]
            if op.type == "Clone" and op.inputs and op.inputs[0] in defs:
                irop = g.operations[defs[op.inputs[0]]]
            scopes.append(module_scope(irop))
        readers: dict[int, list[int]] = {}
        for q, op in enumerate(ops_):
            for v in op.inputs:
                readers.setdefault(v, []).append(q)
        last_of: dict[str, int] = {}  # each module's own last forward step
        for q, sc in enumerate(scopes):
            last_of[sc] = max(last_of.get(sc, 0), self.fwd_step[q])
        ends: dict[str, int] = {}
        for p, op in enumerate(ops_):
            outer = scopes[p]
            if not outer:
                continue
            for v in op.outputs:
                st = self.storage.get(v)
                if st is None:
                    continue
                children = {child_below(scopes[q], outer) for q in readers.get(v, ())} - {None}
                if len(children) < 2:
                    continue
                if self.torchscript and ops.role(op.type) == "broadcast" and op.inputs \
                        and st == self.storage.get(op.inputs[0]) and self.opd[v].nbytes > self.sim.store[st]["bytes"]:
                    # a broadcast view handed down (MPNet's `expand(...).contiguous()` position bias): a
                    # TorchScript file writes the Expand alone, so whether eager copied it (then held the
                    # copy here) is not in the file; named with the peak had it copied (dropped_contiguous)
                    self.handed_views[v] = op.label
                if outer not in ends:
                    ends[outer] = max(last for sc, last in last_of.items()
                                      if sc == outer or child_below(sc, outer) is not None)
                self.fwd_last[st] = max(self.fwd_last.get(st, 0), ends[outer])

    def held_lines(self) -> None:
        """The runs of ops a dynamo file records under one source line (`line_runs`) where a tensor one
        of them makes is freed before the run's last op: in coverage (`held_lines`); with
        `as_held_lines`, each such tensor held to the run's last op."""
        runs, texts = line_runs(self.g, self.ops)
        found, lines = [], []
        for pos in runs:
            end = self.fwd_step[pos[-1]]
            early = [st for p in pos for v in self.ops[p].outputs
                     if (st := self.storage.get(v)) is not None and self.sim.store[st]["first"] == self.fwd_step[p]
                     and self.fwd_last.get(st, 0) < end]
            if not early:
                continue
            found.append(pos)
            lines.append(texts[pos[0]])
            if self.as_held_lines:
                for st in early:
                    self.fwd_last[st] = end
        if found:
            self.sim.coverage["held_lines"] = {"calls": len(found), "ops": sum(len(p) for p in found),
                                               "lines": sorted(set(lines))}

    # ---- helpers ----
    def cols(self, label):
        return self.layer.setdefault(label, {"fwd_mem_out": 0, "fwd_mem_tmp": 0, "bwd_mem_tmp": 0,
                                             "bwd_mem_out": 0})

    def is_c(self, v) -> bool:
        return v not in self.strides or is_contiguous(self.opd[v].shape, self.strides[v])

    def nbytes(self, spec, op, needs):
        """Bytes of `in0` / `in1` / `out0`, or 0 for `in0?g0` when input 0 needs no gradient (`in1?n1`:
        when input 1 needs one); an int is bytes already (a family's own function computed them)."""
        if isinstance(spec, int):
            return spec
        spec, _, cond = spec.partition("?")
        if cond and (int(cond[1:]) < len(needs) and bool(needs[int(cond[1:])])) != (cond[0] == "g"):
            return 0
        mask = spec.startswith("mask:")  # a bool tensor of that many elements
        spec = spec[5:] if mask else spec
        k = int(spec[2:]) if spec.startswith("in") else int(spec[3:])
        v = op.inputs[k] if spec.startswith("in") else op.outputs[k]
        if v < 0:
            return 0
        return elements(self.opd[v].shape) if mask else self.opd[v].nbytes

    def size_of(self, spec, op):
        x = self.opd[op.inputs[0]]
        if spec == "in0":
            return elements(x.shape)
        if spec == "out0":
            return elements(self.opd[op.outputs[0]].shape)
        if spec == "in1":
            return elements(self.opd[op.inputs[1]].shape)
        if spec == "channels":
            return int(x.shape[1]) if len(x.shape) > 1 else 1
        if spec == "groups":  # (N, G): one per sample and group (group_norm's statistics)
            return int(x.shape[0]) * int(op.attrs["groups"])
        if spec == "rows":
            return elements(x.shape[:-1]) if len(x.shape) > 1 else 1
        raise ValueError(f"unknown size rule {spec!r}")

    # ---- held before the step ----
    def saved_integer_constants(self) -> set[int]:
        """Integer constants of more than one element that an eager op's facts save (an index op's
        indices): tensors in eager, where a shape or an axis argument is a Python value."""
        opd, out = self.opd, set()
        for op in self.ops:
            for what, _ in (facts(op) or {}).get("saves", ()):
                k = int(what[2:]) if what.startswith("in") else -1
                v = op.inputs[k] if 0 <= k < len(op.inputs) else -1
                if v >= 0 and opd[v].is_const and opd[v].dtype.startswith(("int", "uint")) and elements(opd[v].shape) > 1:
                    out.add(v)
        return out

    def held_before(self) -> None:
        g, opd, sim, storage, config, tg = self.g, self.opd, self.sim, self.storage, self.config, self.tg
        # a constant only fused-away ops read is none in eager; nor is one read for its shape alone (the
        # dynamo exporter's constant folding turns dropout's `empty_like(x)` into a constant of x's shape)
        # nor one an exporter wrote for an argument eager passes as None (`none_fills`: batch_norm's
        # weight and bias, written as ones / zeros; no parameter, `Operand.computed`)
        read = set()
        for op in self.ops:
            f = facts(op) or {}
            if not f.get("shape_only"):
                fills = f.get("none_fills", ())
                read.update(v for k, v in enumerate(op.inputs)
                            if not (k in fills and v >= 0 and opd[v].computed and v not in self.trained))
        masks = sdpa_masks(g)
        # an sdpa mask received as a computed value is no parameter in eager, also where memplan's
        # parameter rules cannot tell (assumed trainable: T5's position bias, folded with its table)
        self.trained -= {m for m in masks if opd[m].assumed}
        # a constant folded from a parameter's computation that memplan's rules do not train (a 0-d
        # value: DiffLlama's λ, exp(sum(λq·λk)) - ...) is still computed from parameters in eager: it
        # requires grad, so its readers keep what its gradient needs (they are named as estimated)
        self.rg = set(self.trained) | {o.index for o in opd[:len(g.operands)] if o.is_const and o.name in self.folded}
        self.computed = folded_values(g, self.trained, masks)
        # the second call's copy of a folded fill (rewrites.merged_duplicates) is computed as the first
        self.computed |= {o.index for o in opd[len(g.operands):] if o.is_const}
        indices = self.saved_integer_constants()
        # a float tensor a TorchScript file computes with its own ops (attention.computed_in_forward) is
        # a forward value, not held. Integers an index op saves stay held as before: the file does not
        # say which are eager's tensors (an index TorchScript builds for a slice assignment's ScatterND
        # is none; a gather's is one), and a merged layer's copy of one is counted beside it
        # (rewrites.merged_across_layers)
        self.ts_computed = {v for v in computed_in_forward(g, self.trained)
                            if opd[v].dtype.startswith(("float", "bfloat")) and elements(opd[v].shape) > 1}
        self.computed |= self.ts_computed
        # a module buffer no op reads once the loader folded its views (GPT's causal table sliced to
        # the sequence, `bias[:, :, :T, :T]`): eager's module holds it, the slice is a view of it
        buffers = signature_buffers(g)
        read |= {o.index for o in opd if o.is_const and o.name in buffers and elements(o.shape) > 1
                 and o.dtype.startswith(("float", "bfloat"))}
        # and so is a boolean one (ImageGPT's and GPT-2's causal tables as transformers now registers them)
        tables = {o.index for o in opd if o.is_const and o.name in buffers and elements(o.shape) > 1
                  and o.dtype == "bool"}
        for o in opd:
            if (o.is_const and o.dtype.startswith(("float", "bfloat")) and elements(o.shape) > 1 and o.index in read
                    or o.index in tables) and o.index not in self.computed:
                storage[o.index] = sim.new(o.name, "trainable", _held_bytes(o), 0, kind="held")
            elif o.index in indices and o.index not in self.computed:
                # an integer tensor an index op saves (gather keeps its indices): the module's index
                # buffer (TinyViT's and LeViT's attention_bias_idxs, Swin's relative_position_index),
                # held like a float buffer; one eager computes each step instead lives at least until
                # the backward of the op that saves it (a value the dynamo exporter folded is made where
                # eager computes it: `computed`)
                storage[o.index] = sim.new(o.name, "trainable", _held_bytes(o), 0, kind="held")
        pred_of = {}  # label -> the output it labels: (y_pred, label) pairs, one per output with a loss
        if tg.loss_op is not None:
            loss_in = g.operations[tg.loss_op].inputs
            pred_of = {loss_in[k + 1]: loss_in[k] for k in range(0, len(loss_in) - 1, 2)}
        for v in g.inputs:
            o = opd[v]
            if v in pred_of:
                y_pred = opd[pred_of[v]]
                if config.loss == "cce":
                    n = elements(y_pred.shape[:-1]) if len(y_pred.shape) > 1 else 1
                    storage[v] = sim.new("label", "non-const", 8 * n, 0, kind="held")
                else:
                    storage[v] = sim.new("label", "non-const", y_pred.nbytes, 0, kind="held")
            else:
                storage[v] = sim.new(o.name, "non-const", o.nbytes, 0, kind="held")
        for op in self.ops:
            for v in op.inputs:
                if v in self.trained and v not in self.params_order:
                    self.params_order.append(v)
        self.params_order = registration_order(self.params_order, g, opd)
        self.held = list(range(len(sim.store)))
        # a view of a trained weight (a tied weight's Transpose) is that weight to autocast's cast cache
        trained = self.trained
        weight_of_storage = {storage[w]: w for w in trained if w in storage}
        self.ac.weight_of = lambda v: v if v in trained else weight_of_storage.get(storage.get(v))
        state_count = {"sgd": 0, "momentum": 1, "adam": 2}[config.optimizer]
        estimated = set(g.metadata.get(ESTIMATED_PARAMS) or ()) if g.metadata else set()
        # tables folded, several into one constant, through lookups: the constant counted for them
        estimated |= set(folded_lookup_tables(g))
        if estimated:
            # parameters run again from a folded constant at a shape the file does not record (a position
            # table's rows beyond those read): counted at the shape the file keeps, named
            sim.coverage["estimated_parameters"] = sorted(estimated)
        for w in self.params_order:
            # a folded computation (estimated), or a parameter of one run again at an estimated shape: the
            # constant and its state count as its first reader's
            owner = next((op.label for op in self.ops if w in op.inputs and op.attrs.get(ESTIMATED)), "") \
                if opd[w].name in self.folded or opd[w].name in estimated else ""
            if owner and w in storage:
                sim.store[storage[w]]["owner"] = owner
            for k in range(state_count):
                self.held.append(sim.new(f"{opd[w].name}:state{k}", "opt-variable", opd[w].nbytes, 0, owner,
                                         kind="held"))
            if config.optimizer == "adam":
                self.held.append(sim.new(f"{opd[w].name}:step", "opt-variable", 4, 0, owner, kind="held"))

    # ---- forward ----
    def forward(self) -> None:
        sim, opd, storage = self.sim, self.opd, self.storage
        for p, op in enumerate(self.ops):
            s = sim.step("forward", op.index, op.label)
            for v in op.inputs:
                if v < 0:
                    continue
                if v in self.computed and v not in storage:  # eager computes it here, a forward value
                    # a broadcast a TorchScript file computes (Operand.broadcast_of) is a view of the
                    # values it repeats, as when it was held
                    nb = expand_base_bytes(opd[v]) or (_held_bytes(opd[v]) if v in self.ts_computed else opd[v].nbytes)
                    storage[v] = sim.new(opd[v].name, "non-const", nb, s, op.label, "out")
                if v in storage:
                    self.fwd_last[storage[v]] = s
            det = op.attrs.get("detached", ())  # inputs read through .detach() (rewrites.detached_reads)
            needs = [v in self.rg and k not in det for k, v in enumerate(op.inputs)]
            f = facts(op) or {}
            # a random mask never carries a gradient; nor does a no-grad op (aten::size of a tensor that
            # requires grad records no node: no phantom gradient back into its input)
            rec = any(needs) and not f.get("draws") and not no_grad(op.type)
            self.fwd_step[p] = s
            if op.type == LOSS_TYPE:
                saved = self.forward_loss(op, s)
            else:
                saved = self.forward_op(p, op, s, f, needs, rec)
            if rec and op.attrs.get("no_node"):
                # a node nothing runs (rewrites.gradientless): what it saved dies with it
                self.dying[p] = saved
                rec = False
            self.node[p] = rec
            self.saved_by[p] = saved if rec else []
        loss_step = len(sim.steps) - 1
        self.unrun_nodes_die()
        self.ac.end_forward(sim, loss_step)
        # the graph's outputs (the loss) are held by the caller
        for v in self.g.outputs:
            if v in storage:
                self.fwd_last[storage[v]] = max(self.fwd_last.get(storage[v], 0), loss_step)

    def unrun_nodes_die(self) -> None:
        """A node nothing runs is freed when its results die and no later such node refers to it (a
        node holds its inputs' nodes): what it saved lives until then."""
        readers: dict[int, list[tuple[int, int]]] = {}
        for q, op in enumerate(self.ops):
            for k, v in enumerate(op.inputs):
                readers.setdefault(v, []).append((q, k))
        dies: dict[int, int] = {}
        for p in sorted(self.dying, reverse=True):
            end = self.fwd_step[p]
            for v in self.ops[p].outputs:
                st = self.storage.get(v)
                end = max(end, self.fwd_last.get(st, end) if st is not None else end)
                end = max([end] + [dies[q] for q, k in readers.get(v, ())
                                   if q in dies and k not in self.ops[q].attrs.get("detached", ())])
            dies[p] = end
            for st in self.dying[p]:
                self.fwd_last[st] = max(self.fwd_last.get(st, 0), end)

    def forward_loss(self, op, s) -> list:
        """The loss: cross-entropy keeps log_softmax's result and a total weight; mse its inputs. With
        several outputs (a question-answering head's start and end logits) one loss per output, in
        order, then their sum (`loss_0 + loss_1`: each a scalar, the sum a new one; AddBackward saves
        nothing). What each output's loss saved is kept apart for its own backward step."""
        sim, opd, c = self.sim, self.opd, self.cols(op.label)
        saved = []
        pairs = range(0, len(op.inputs) - 1, 2)
        self.loss_saved = []
        for k in pairs:
            x, mine = op.inputs[k], []
            self.ac.loss_forward(sim, x, s, op.label, c)
            if self.config.loss == "cce":
                n_el = elements(opd[x].shape) * dtype_size(opd[op.outputs[0]].dtype)  # the loss's dtype
                mine.append(sim.new(f"{op.label}:log_softmax", "non-const", n_el, s, op.label, "saved"))
                mine.append(sim.new(f"{op.label}:total_weight", "non-const", 4, s, op.label, "tmp"))
                c["fwd_mem_tmp"] += n_el + 4
            else:
                mine += [self.storage[x], self.storage[op.inputs[k + 1]]]
            if len(pairs) > 1:  # this output's loss, a scalar the sum reads
                sim.new(f"{op.label}:loss{k // 2}", "non-const", 4, s, op.label, "tmp")
                c["fwd_mem_tmp"] += 4
            self.loss_saved.append(mine)
            saved += [st for st in mine if st not in saved]
        out = sim.new(f"{op.label}:loss", "non-const", 4, s, op.label, "out")
        c["fwd_mem_out"] += 4
        self.storage[op.outputs[0]] = out
        self.rg.add(op.outputs[0])
        return saved

    def forward_op(self, p, op, s, f, needs, rec) -> list:
        """One op's forward: copies of inputs its kernel needs contiguous, its outputs (new or views),
        what it saves for backward and its scratch. Returns the storages it saved."""
        sim, opd, c = self.sim, self.opd, self.cols(op.label)
        copies = self.contiguous_copies(op, s, f)
        copies.update(self.ac.forward_casts(sim, op, p, s, op.label))
        outs = self.outputs(op, s, f)
        self.dropped_contiguous(op, outs)
        memory_format(op, opd, self.contig, self.cl, self.strides)
        if op.attrs.get(ESTIMATED):  # a kernel its memory format chose may be estimated too
            sim.coverage["estimated"].setdefault(op.label, op.attrs.get("function") or op.type)
            if op.attrs.get(ESTIMATED_WHY):
                sim.coverage["why"].setdefault(op.label, op.attrs[ESTIMATED_WHY])
        cached = f.get("cache_sized") and f["cache_sized"](op, opd)  # bytes a kernel's cache model sizes
        if cached:
            sim.coverage["cache_sized"].setdefault(op.label, (op.type, cached))
        cn = f.get("copies_noncontiguous")
        if rec and cn and (not callable(cn) or cn(op, opd)) and not self.contig.get(op.inputs[0], True):
            self.noncontig_in.add(p)
            sim.new(f"{op.label}:contiguous", "extra", opd[op.inputs[0]].nbytes, s, op.label, "scratch")
            c["fwd_mem_tmp"] += opd[op.inputs[0]].nbytes
        if rec and not no_grad(op.type):
            for v in outs:
                if floating(opd[v]):  # an integer / bool result (top-k's indices) never requires grad
                    self.rg.add(v)
        saved = []
        if rec:
            saved = self.saves(op, p, s, f, needs, copies)
        for st in copies.values():
            if st not in saved:
                sim.touch(st, s)
        return saved

    def dropped_contiguous(self, op, outs) -> None:
        """Where a TorchScript file may have dropped a `.contiguous()` that copied in eager: its symbolic
        returns the input, so `x.transpose(1, 2).contiguous()` leaves the Transpose alone. Before a
        reshape that merges the permuted dims the call costs nothing beyond the reshape's own copy;
        before a reshape to the permuted tensor's own shape (ProphetNet's `_shape`, then
        `reshape(b, heads, -1, d)`) it is a copy eager makes and the replay does not. The file cannot
        say whether the code called it: the figure counts no copy and the report names the views
        (`contiguous_sites`) and their bytes. A dynamo file records the call (rewrites.lost_clones,
        output_clones). The model's output made as a view of a larger tensor is named alike
        (`output_views`): copied, its base is freed when the forward returns, not held to the step's end."""
        if self.dynamo or not outs or outs[0] != op.outputs[0]:
            return
        st = self.storage.get(outs[0])
        if self.torchscript and outs[0] in self.model_outputs and op.inputs and st is not None \
                and st == self.storage.get(op.inputs[0]) and self.sim.store[st]["bytes"] > self.opd[outs[0]].nbytes:
            # the model's output viewing a larger tensor (a select or slice of a head's output): eager
            # holds the whole base to the end of the step, unless the code copied it (ProphetNet's
            # `predict_logits[:, 0].contiguous()`), which frees the base once the forward returns
            self.output_views[outs[0]] = op.label
            return
        if ops.role(op.type) != "reshape":
            return
        x0 = op.inputs[0]
        made = self.view_of.get(x0)
        # a permutation of a contiguous tensor (what `.transpose(1, 2).contiguous()` copies), then
        # reshaped to its own shape: a no-op in the file, where code views what it made contiguous (a
        # reshape into other dims, an image's (B, C, H, W) of its tokens, is often called on the
        # permuted tensor itself, and its memory format then decides a convolution's kernel)
        if made is None or made[2] != TRANSPOSE or self.is_c(x0) or not self.is_c(made[0]) \
                or x0 in self.contiguous_sites or tuple(self.opd[outs[0]].shape) != tuple(self.opd[x0].shape):
            return
        if self.storage.get(outs[0]) == self.storage.get(x0):
            self.contiguous_sites[x0] = made[1]

    def contiguous_copies(self, op, s, f) -> dict:
        """Inputs a kernel needs contiguous: a copy of a non-contiguous view ("in0" / "in1" -> storage)."""
        opd, c = self.opd, self.cols(op.label)
        copies = {}
        if f.get("bmm_operands"):  # the tensors einsum's bmm saves in place of its operands
            sts = [self.strides.get(v) or contiguous_strides(opd[v].shape) for v in op.inputs]
            for k, nb in enumerate(f["bmm_operands"](op, opd, sts, view_strides)):
                if nb:
                    copies[f"in{k}"] = self.sim.new(f"{op.label}:operand{k}", "non-const", nb, s, op.label, "copy")
                    c["fwd_mem_tmp"] += nb
            return copies
        if f.get("contiguous_inputs") or op.type in WEIGHT_MATMULS:
            w2d = len(op.inputs) > 1 and op.inputs[1] >= 0 and len(opd[op.inputs[1]].shape) == 2
            ex = f["expanded_inputs"](op, opd) if f.get("expanded_inputs") else ()
            for k, v in enumerate(op.inputs[:2]):
                if v >= 0 and k < len(ex) and ex[k] is not None:
                    # expanded over broadcast batch dims, then reshaped for bmm: a copy of the
                    # expanded size where no view exists
                    shp = opd[v].shape
                    est = expanded_strides(shp, self.strides[v] if v in self.strides else contiguous_strides(shp),
                                           ex[k])
                    if bmm_copies(ex[k], est):
                        nb = elements(ex[k]) * dtype_size(opd[v].dtype)
                        copies[f"in{k}"] = self.sim.new(f"{op.label}:expanded{k}", "non-const", nb, s, op.label,
                                                        "copy")
                        c["fwd_mem_tmp"] += nb
                    continue
                if v < 0 or self.is_c(v) or len(opd[v].shape) <= 2:
                    continue  # a 2-D transposed operand goes to BLAS as it is
                shp = opd[v].shape
                if k == 0 and w2d:  # against a 2-D weight all leading dims fold into rows: a reshape
                    copy = view_strides(shp, self.strides[v], (elements(shp[:-1]), int(shp[-1]))) is None
                else:
                    copy = bool(f.get("contiguous_inputs")) and bmm_copies(shp, self.strides[v])
                if copy:
                    cp = self.sim.new(f"{op.label}:contiguous{k}", "non-const", opd[v].nbytes, s, op.label, "copy")
                    c["fwd_mem_tmp"] += opd[v].nbytes
                    copies[f"in{k}"] = cp
        return copies

    def outputs(self, op, s, f) -> list:
        """The op's outputs eager makes: views of input 0 (with their strides) or new tensors (with the
        layout their kernel gives them). Returns the operands made."""
        sim, opd, storage, strides, c = self.sim, self.opd, self.storage, self.strides, self.cols(op.label)
        outs = []
        view = bool(f.get("view"))
        if f.get("view_if") is not None and f["view_if"](op):
            view = True
        x0 = op.inputs[0] if op.inputs else -1
        for k, v in enumerate(op.outputs):
            if not self.uses.get(v) and v not in self.g.outputs:
                continue  # an exporter's extra output (running statistics, a mask): none in eager
            vs = None
            if view and (k == 0 or f.get("view") == "all"):
                # a reshape that no view can express copies (contiguous result)
                vs = view_output_strides(op, opd, strides.get(x0) or contiguous_strides(opd[x0].shape), k)
            if vs is not None:
                storage[v] = storage.get(x0)
                self.view_of[v] = (x0, op.label, op.type)
                if not is_contiguous(opd[v].shape, vs) or channels_last_2d(opd[v].shape, vs):
                    strides[v] = vs  # kept when contiguous too if a convolution would read it channels-last
                self.contig[v] = is_contiguous(opd[v].shape, vs)
            else:
                storage[v] = sim.new(opd[v].name, "non-const", opd[v].nbytes, s, op.label, "out")
                c["fwd_mem_out"] += opd[v].nbytes
                # the new tensor's layout: its kernel's, like input 0 (empty_like), or TensorIterator's
                if f.get("out_strides") and k == 0:
                    lay = f["out_strides"](op, opd)
                    if lay and not is_contiguous(opd[v].shape, lay):
                        strides[v] = tuple(lay)
                elif f.get("format") == "all_inputs" and k == 0 and len(opd[v].shape) == 4 and \
                        all(i in strides and channels_last_2d(opd[i].shape, strides[i]) for i in op.inputs if i >= 0):
                    n, ch, h, w = (int(d) for d in opd[v].shape)  # every input channels-last: so is the result
                    strides[v] = (h * w * ch, 1, w * ch, ch)
                elif f.get("layout") == "in0" and x0 in strides and opd[v].shape == opd[x0].shape:
                    strides[v] = strides[x0]
                elif op.type in LAYOUT_KEEPING and k == 0 and any(i in strides for i in op.inputs if i >= 0):
                    lay = iterator_strides(opd[v].shape, [(opd[i].shape, strides.get(i) or
                                                           contiguous_strides(opd[i].shape))
                                                          for i in op.inputs if i >= 0])
                    if not is_contiguous(opd[v].shape, lay):
                        strides[v] = lay
                self.contig[v] = v not in strides
            outs.append(v)
        return outs

    def saves(self, op, p, s, f, needs, copies) -> list:
        """What the op saves for backward (its facts' "saves", a copy where it made one, autocast's
        weight copies, the auxiliary tensors), and its forward scratch."""
        sim, opd, storage, c = self.sim, self.opd, self.storage, self.cols(op.label)
        saved = []
        for what, when in f.get("saves", ()):
            if when == "any" or (when.startswith("g") and int(when[1:]) < len(needs) and needs[int(when[1:])]):
                if what in copies:
                    saved.append(copies[what])
                elif what.startswith("in"):
                    k = int(what[2:])
                    if k < len(op.inputs) and op.inputs[k] >= 0 and op.inputs[k] in storage:
                        saved.append(storage[op.inputs[k]])
                elif what.startswith("out"):
                    k = int(what[3:])
                    if op.outputs[k] in storage:
                        saved.append(storage[op.outputs[k]])
        saved += [st for st in self.ac.saved_weight_copies(op, p, needs, copies) if st not in saved]
        alts = f.get("fwd_scratch", ())
        alts = alts(op, opd) if callable(alts) else alts
        tmp_b = max((sum(self.nbytes(x, op, needs) for x in alt) for alt in alts), default=0)
        if tmp_b:
            sim.new(f"{op.label}:scratch", "extra", tmp_b, s, op.label, "scratch")
            c["fwd_mem_tmp"] += tmp_b
        specs = f.get("fwd_tmp", ())
        for spec in (specs(op, opd) if callable(specs) else specs):  # tensors the forward makes and frees in the op
            nb = self.nbytes(spec, op, needs)
            sim.new(f"{op.label}:tmp", "non-const", nb, s, op.label, "tmp")
            c["fwd_mem_tmp"] += nb
        for name, spec, dtype in f.get("aux", ()):
            nb = self.size_of(spec, op) * dtype_size(opd[op.inputs[0]].dtype if dtype == "in0" else dtype)
            saved.append(sim.new(f"{op.label}:{name}", "extra", nb, s, op.label, "saved"))
            c["fwd_mem_tmp"] += nb
        return saved

    # ---- backward ----
    def backward(self) -> None:
        sim = self.sim
        for p in range(len(self.ops) - 1, -1, -1):
            op = self.ops[p]
            if not self.node[p]:
                continue
            s = sim.step("calcDerivative", op.index, op.label)
            c = self.cols(op.label)
            made: list[int] = []  # storages created by this backward
            tmp: list[int] = []
            if op.type == LOSS_TYPE:
                s = self.backward_loss(op, s, made, tmp)  # it releases what each output's loss saved
            else:
                s = self.backward_op(p, op, s, made, tmp)
                for st in self.saved_by[p]:
                    self.release_at[st] = max(self.release_at.get(st, 0), s)
            c["bwd_mem_out"] += sum(sim.store[m]["bytes"] for m in made)
            for st in {sim.store[t]["first"] for t in tmp}:  # temporaries live in one step each
                c["bwd_mem_tmp"] = max(c["bwd_mem_tmp"], sum(sim.store[t]["bytes"] for t in tmp
                                                             if sim.store[t]["first"] == st))

    def backward_loss(self, op, s, made, tmp) -> int:
        """Cross-entropy's backward: the loss's unit gradient, nll_loss's and log_softmax's gradients.
        With several outputs, AddBackward hands the unit gradient to each output's loss, and autograd
        runs the one made last first (its node has the higher sequence number), each in a step of its
        own: nll_loss's gradient is freed before the next one's is made, the outputs' gradients stay
        until the model's ops read them. Returns the last step."""
        sim, opd, ac = self.sim, self.opd, self.ac
        one = sim.new("loss:grad", "back-prop", 4, s, op.label, "tmp")
        tmp.append(one)
        pairs = list(range(0, len(op.inputs) - 1, 2))
        for n, k in enumerate(reversed(pairs)):
            if n:
                s = sim.step("calcDerivative", op.index, op.label)
                sim.touch(one, s)
            x = op.inputs[k]
            nb = opd[x].nbytes
            t = sim.new(f"{op.label}:nll_grad", "back-prop", ac.loss_grad_bytes(x), s, op.label, "tmp")
            tmp.append(t)
            tmp += ac.loss_backward_tmps(sim, x, s, op.label)
            gx = sim.new(f"{opd[x].name}:grad", "back-prop", nb, s, op.label, "grad")
            made.append(gx)
            self.deliver(x, gx, True, s, made, tmp, op.label)
            for st in self.loss_saved[k // 2]:
                self.release_at[st] = max(self.release_at.get(st, 0), s)
            s = ac.after_loss_backward(sim, x, op, s, gx, tmp)
        return s

    def backward_op(self, p, op, s, made, tmp) -> int:
        """One op's backward: the gradients of its inputs that require grad (new, or the incoming one
        passed on), the weights' `.grad`, and its temporaries. Returns the step it ends in."""
        sim, opd, grad, grad_contig, trained = self.sim, self.opd, self.grad, self.grad_contig, self.trained
        f = facts(op) or {}
        # an op whose kernel computes the input's gradient, then the weight's, with their own
        # scratch (convolution_backward) gets two steps: the weight's gradient is not yet made
        # while the input's is
        s_dw = sim.step("calcGradient", op.index, op.label) if "bwd_scratch_dw" in f else s
        outs = [v for v in op.outputs if v in self.storage]
        g_out = [grad.get(v) for v in outs]
        for st in g_out:
            sim.touch(st, s_dw)
        incoming_contig = all(grad_contig.get(v, True) for v in outs)
        cg = f.get("contiguous_grad")
        if cg and not incoming_contig and (not callable(cg) or cg(op, opd)):
            # the kernel copies the incoming gradient contiguous first; the copy serves both phases
            copy = sim.new(f"{op.label}:grad_contiguous", "disposable", sum(opd[v].nbytes for v in outs), s,
                           op.label, "scratch")
            sim.touch(copy, s_dw)
            tmp.append(copy)
        elif f.get("grad_reshaped") and outs and f["grad_reshaped"](op, opd) is not None:
            # the op's kernel ran on a reshape and viewed its result back (a linear over more than
            # two dims, einsum's bmm): that view's backward reshapes the incoming gradient, a copy
            # where its strides allow no view; the copy serves every gradient of the op. A gradient
            # of unknown strides (a slice's: rows of a wider tensor, a view) is not copied
            axes, shape = f["grad_reshaped"](op, opd)
            y = tuple(opd[outs[0]].shape)
            gs = contiguous_strides(y) if incoming_contig else self.grad_strides.get(outs[0])
            if gs and view_strides([y[a] for a in axes], [gs[a] for a in axes], shape) is None:
                copy = sim.new(f"{op.label}:grad_reshaped", "disposable", opd[outs[0]].nbytes, s, op.label,
                               "tmp")
                sim.touch(copy, s_dw)
                tmp.append(copy)
        gr = f.get("grad_reorders")
        if gr and outs and not incoming_contig and self.contig.get(op.inputs[0], True) and gr(op, opd):
            # oneDNN's eltwise backward reorders a gradient of other strides to the input's plain layout
            # and makes its result plain before reordering it into the gradient's strides
            tmp.append(sim.new(f"{op.label}:grad_reorders", "disposable", gr(op, opd) * opd[outs[0]].nbytes, s,
                               op.label, "scratch"))
        mode = f.get("grad", "new")
        det = op.attrs.get("detached", ())
        # inputs whose gradient the kernel's second phase makes, a parameter or a computed tensor alike
        # (mkldnn_convolution_backward: the input's gradient when output_mask[0], then the weight's
        # and the bias's when output_mask[1] or [2]: a standardised weight's is not yet made in the first)
        late = set(f.get("dw_inputs", ())) if s_dw != s else set()
        ex = f["expanded_inputs"](op, opd) if f.get("expanded_inputs") else ()
        s_sum = None  # the step that sums expanded gradients down (after the op's saved tensors are freed)
        for k, v in enumerate(op.inputs):
            if v < 0 or v not in self.rg or k in det:
                continue
            if k < len(ex) and ex[k] is not None:
                # bmm's gradient of the expanded operand, then ExpandBackward0's sum to the input's shape
                if s_sum is None:
                    s_sum = sim.step("calcDerivative", op.index, op.label)
                big = sim.new(f"{opd[v].name}:grad_expanded", "back-prop", elements(ex[k]) * dtype_size(opd[v].dtype),
                              s, op.label, "tmp")
                sim.touch(big, s_sum)
                tmp.append(big)
                if v in trained:
                    self.weight_grad(v, op, s_sum, made, tmp)
                else:
                    gx = sim.new(f"{opd[v].name}:grad", "back-prop", opd[v].nbytes, s_sum, op.label, "grad")
                    made.append(gx)
                    self.deliver(v, gx, True, s_sum, made, tmp, op.label)
                continue
            if v not in trained and cast_grad(opd[v], opd[op.outputs[0]]):
                # the engine's validate_outputs casts a gradient to its input's dtype: a bfloat16 input of
                # a float32 sum (autocast's residual stream) gets a copy, not the incoming gradient
                gx = sim.new(f"{opd[v].name}:grad", "back-prop", opd[v].nbytes, s, op.label, "grad")
                made.append(gx)
                self.deliver(v, gx, True, s, made, tmp, op.label)
                continue
            if k in f.get("grad_shared", ()):
                if tuple(opd[v].shape) == tuple(opd[op.outputs[0]].shape) and g_out and g_out[0] is not None:
                    self.deliver(v, g_out[0], incoming_contig, s, made, tmp, op.label, shared=True,
                                 strides=None if incoming_contig else self.grad_strides.get(outs[0]))
                    continue
            if mode in ("view", "pass") and g_out and g_out[0] is not None and v in trained and (
                    not f.get("view_needs_contiguous") or incoming_contig):
                if elements(opd[v].shape) < elements(opd[op.outputs[0]].shape):
                    # a weight broadcast (a position embedding added to every sample): the engine sums
                    # the incoming gradient to the weight's shape (validate_outputs: sum_to), a new
                    # tensor that becomes its .grad
                    self.weight_grad(v, op, s_dw, made, tmp)
                    continue
                if incoming_contig and not f.get("strided"):
                    self.weight_grad_of_view(v, g_out[0], op, s, made, tmp)
                    continue
                self.deliver(v, g_out[0], False, s, made, tmp, op.label, shared=True)
                self.view_delivered[v] = s
                continue
            if mode in ("view", "pass") and g_out and g_out[0] is not None and v not in trained:
                in_st = self.view_grad_strides(op, f, v, outs[0], incoming_contig)
                if in_st is not None:
                    self.deliver(v, g_out[0], in_st != () and is_contiguous(opd[v].shape, in_st), s, made, tmp,
                                 op.label, shared=True, strides=in_st or None)
                    continue
            if mode == "expand" and g_out and g_out[0] is not None and v not in trained:
                # the incoming gradient broadcast back over the reduced axes (stride 0 there): no bytes
                broadcast = elements(opd[v].shape) != elements(opd[op.outputs[0]].shape)
                self.deliver(v, g_out[0], incoming_contig and not broadcast, s, made, tmp, op.label, shared=True)
                continue
            if v in trained:
                self.weight_grad(v, op, s_dw, made, tmp)
                continue
            at = s_dw if k in late else s
            # a gradient that is a view of a larger tensor (the real part of a complex one) holds all of it
            gb = f.get("grad_bytes")
            nb = (gb(op, opd, k) if gb else None) or opd[v].nbytes
            gx = sim.new(f"{opd[v].name}:grad", "back-prop", nb, at, op.label, "grad")
            made.append(gx)
            # an elementwise backward (TensorIterator, the incoming gradient its first input) lays its
            # result out like the incoming gradient: a transposed view's stays non-contiguous
            dense = incoming_contig or op.type not in GRAD_LAYOUT_KEEPING or \
                tuple(opd[v].shape) != tuple(opd[op.outputs[0]].shape)
            self.deliver(v, gx, dense, at, made, tmp, op.label,
                         strides=None if dense else self.grad_strides.get(outs[0]) if outs else None)
        if s_dw != s:
            # the engine adds an input's gradient into an earlier one when the op's backward returns,
            # after the weight's gradient is made: it lives through both steps (measured, ConvNeXt's
            # depthwise convolution beside the residual)
            for t in tmp:
                if sim.store[t]["kind"] == "grad" and sim.store[t]["first"] == s:
                    sim.touch(t, s_dw)
        needs = [v in self.rg and k not in det for k, v in enumerate(op.inputs)]
        dx = any(n and v not in trained and k not in late for k, (v, n) in enumerate(zip(op.inputs, needs)))
        dw = any(v in trained for v in op.inputs) or any(needs[k] for k in late if k < len(needs))
        est = f.get("estimated_dx")
        if dx and est and alternatives(est, op, opd, needs):  # the input's gradient, counted approximately
            sim.coverage["estimated"].setdefault(op.label, op.attrs.get("function") or op.type)
        if p in self.noncontig_in:  # the saved non-contiguous input is made contiguous again
            copy = sim.new(f"{op.label}:contiguous", "disposable", opd[op.inputs[0]].nbytes, s, op.label, "scratch")
            sim.touch(copy, s_dw)  # through the weight's phase too, where there is one
            tmp.append(copy)
        for key, kind, at, runs in (("bwd_tmp", "tmp", s, True), ("bwd_scratch", "scratch", s, True),
                                    ("bwd_scratch_dx", "scratch", s, dx), ("bwd_scratch_dw", "scratch", s_dw, dw)):
            alts = f.get(key, ()) if runs else ()
            if alts == "unused_outputs":  # zeros for each output that got no gradient
                alts = ((sum(opd[v].nbytes for v in op.outputs if v >= 0 and grad.get(v) is None),),)
            alts = alternatives(alts, op, opd, needs) if callable(alts) else alts
            tmp_b = max((sum(self.nbytes(x, op, needs) for x in alt) for alt in alts), default=0)
            if tmp_b:
                tmp.append(sim.new(f"{op.label}:{kind}", "disposable", tmp_b, at, op.label, kind))
        self.ac.after_backward(sim, op, p, s_dw, needs, made, tmp)
        return s_dw

    def weight_grad(self, v, op, s_dw, made, tmp) -> None:
        """A trained weight's gradient, kept in `.grad` to the end of the step."""
        sim, opd, grad, grad_contig = self.sim, self.opd, self.grad, self.grad_contig
        gw = sim.new(f"{opd[v].name}:grad", "gradient", opd[v].nbytes, s_dw, op.label, "wgrad")
        made.append(gw)
        self.grads_of_weights.append(gw)
        if grad.get(v) is not None and grad_contig.get(v, True):
            # a weight read twice: the second gradient is added into the first in place
            tmp.append(gw)
            made.remove(gw)
            self.grads_of_weights.remove(gw)
        elif grad.get(v) is not None:
            # the first is a transposed view (a tied weight's, through its Transpose): the sum
            # is a new tensor, both addends freed (the engine's InputBuffer, measured). The engine adds
            # a node's outputs into the next nodes' input buffers after the node has returned
            # (engine.cpp evaluate_function: call_function, release_variables, then InputBuffer::add):
            # the sum is made in a step of its own, after the op's incoming gradient, saved tensors and
            # temporaries are freed (measured: a tied embedding table's, transformers' ConvBERT)
            tmp.append(gw)
            made.remove(gw)
            self.grads_of_weights.remove(gw)
            s_sum = sim.step("calcGradient", op.index, op.label)
            sim.touch(gw, s_sum)
            sim.touch(grad[v], s_sum)
            new = sim.new(f"{opd[v].name}:grad", "gradient", opd[v].nbytes, s_sum, op.label, "wgrad")
            made.append(new)
            self.grads_of_weights.append(new)
            grad[v] = new
            grad_contig[v] = True
        else:
            grad[v] = gw

    def weight_grad_of_view(self, v, st, op, s, made, tmp) -> None:
        """A trained weight read through a view (timm's `weight.reshape(1, out, -1)` before
        batch_norm): the view's backward hands it the incoming gradient, laid out as the weight.
        AccumulateGrad keeps that tensor as `.grad` (it steals a gradient nothing else holds that obeys
        the weight's layout) until the end of the step; one another operand still holds is copied;
        a later gradient is added into the first."""
        sim, grad = self.sim, self.grad
        if grad.get(v) is not None and self.grad_contig.get(v, True):
            sim.touch(grad[v], s)  # added in place; the incoming one is freed with its last reader
            return
        if grad.get(v) is not None or any(u != v and g == st for u, g in grad.items()):
            self.weight_grad(v, op, s, made, tmp)
            return
        sim.store[st]["category"] = "gradient"
        sim.store[st]["kind"] = "wgrad"
        self.grads_of_weights.append(st)
        grad[v] = st
        self.grad_contig[v] = True

    def view_grad_strides(self, op, f, v, out, incoming_contig):
        """The strides of input `v`'s gradient when the view op `op` passes the incoming gradient on as a
        view of it; () a view of unknown non-contiguous strides; None when it is copied instead. The
        backward of a transpose is the inverse permutation; of a reshape, a reshape (ATen's
        computeStride: a view of a non-contiguous gradient where its strides allow one, as in the
        forward)."""
        opd = self.opd
        if self.grad_contig.get(out, True):
            gs = contiguous_strides(opd[out].shape)
        else:
            gs = self.grad_strides.get(out)
        if f.get("view_needs_contiguous"):
            if gs is None:
                return None if not incoming_contig else contiguous_strides(opd[v].shape)
            return view_strides(opd[out].shape, gs, opd[v].shape)
        if op.type == TRANSPOSE and op.call and (parse_call(op.call) or ("", ""))[1] not in PERMUTE_CALLS:
            return ()  # part of another aten op's export (slice_scatter's): its layout is not eager's
        if f.get("strided") and op.type == TRANSPOSE and gs is not None:
            perm = op.attrs.get("perm") or tuple(reversed(range(len(opd[v].shape))))
            in_st = [0] * len(perm)
            for i, axis in enumerate(perm):
                in_st[int(axis)] = gs[i]
            return tuple(in_st)
        if incoming_contig and not f.get("strided"):
            return contiguous_strides(opd[v].shape)
        return gs if gs is not None and tuple(opd[v].shape) == tuple(opd[out].shape) and \
            not f.get("strided") else ()

    def deliver(self, v, st, is_contig, s, made, tmp, label, shared=False, strides=None) -> None:
        """Gradient `st` reaches operand `v`: the first is kept, a later one is added into it and freed.
        `strides`: a non-contiguous gradient's strides, where known."""
        sim, grad, grad_contig = self.sim, self.grad, self.grad_contig
        if grad.get(v) is None:
            grad[v] = st
            grad_contig[v] = is_contig
            if not is_contig and strides:
                self.grad_strides[v] = tuple(strides)
            return
        if shared:
            # the incoming gradient itself cannot be added in place into: the sum is a new tensor
            nb = self.opd[v].nbytes
            new = sim.new(f"{self.opd[v].name}:grad_sum", "back-prop", nb, s, label, "grad")
            made.append(new)
            sim.touch(grad[v], s)
            grad[v] = new
            grad_contig[v] = True
            return
        sim.touch(grad[v], s)
        if st in made:
            made.remove(st)
        tmp.append(st)

    def accumulate_view_grads(self) -> None:
        """A trained weight whose gradients all came through strided views (a weight shared by several
        linears, each reading it through its own Transpose: CoaT's `mlp2 = mlp3 = mlp4`): when the
        last one has arrived, AccumulateGrad makes the sum `.grad` until the end of the step. It keeps a
        contiguous sum as it is and copies a transposed view into the weight's layout
        (accumulate_grad.h: `obeys_layout_contract`, else `clone_obey_contract`)."""
        sim, grad = self.sim, self.grad
        for v, s in self.view_delivered.items():
            st = grad.get(v)
            if st is None or st in self.grads_of_weights:
                continue
            if self.grad_contig.get(v, True) and sim.store[st]["last"] <= s:
                sim.store[st]["category"] = "gradient"
                sim.store[st]["kind"] = "wgrad"
                self.grads_of_weights.append(st)
                continue
            sim.touch(st, s)
            self.grads_of_weights.append(sim.new(f"{self.opd[v].name}:grad", "gradient", self.opd[v].nbytes, s,
                                                 sim.store[st]["owner"], "wgrad"))

    # ---- lifetimes of forward storages ----
    def lifetimes(self) -> None:
        for st, last in self.fwd_last.items():
            self.sim.touch(st, last)
        for st, last in self.release_at.items():
            self.sim.touch(st, last)

    # ---- optimizer step ----
    def optimizer(self) -> None:
        sim, opd = self.sim, self.opd
        prev = None
        for w in self.params_order:
            s = sim.step("applyGradient", -1, f"step {opd[w].name}")
            if self.config.optimizer == "adam":
                nb = opd[w].nbytes
                sim.new(f"{opd[w].name}:sqrt", "disposable", nb, s, "", "tmp")
                d = sim.new(f"{opd[w].name}:denom", "disposable", nb, s, "", "tmp")
                sim.touch(prev, s)
                prev = d

    def end_of_step(self) -> None:
        sim, g, tg = self.sim, self.g, self.tg
        end = len(sim.steps) - 1
        # the training loop holds the model's output and the loss (`out = model(x); loss = lossfn(out, y)`)
        if tg.loss_op is not None:  # every output, where the model has several (`out` is their tuple)
            loss = g.operations[tg.loss_op]
            for v in loss.inputs[0:len(loss.inputs) - 1:2] + loss.outputs[:1]:
                sim.touch(self.storage.get(v), end)
        for st in self.grads_of_weights:
            sim.touch(st, end)
        for st in self.held:
            sim.touch(st, end)


def registration_order(order: list[int], g, opd) -> list[int]:
    """The trained weights in the order eager's optimizer steps them: `model.parameters()`, the modules'
    registration order (Adam's single-tensor loop on CPU; a weight's `denom` lives until the next
    weight's is made). A dynamo export's graph signature lists the parameters in that order
    (torch.export lifts `named_parameters()`); the weights it names (by target, or folded from one:
    `Operand.sources`) take the places the forward's first reads gave them, in the signature's order.
    A TorchScript export writes its initializers in state_dict order, which is that order too (the
    names it made itself excepted). Other files: the forward's first reads stay the order."""
    md = getattr(g, "metadata", None) or {}
    sig = g.signature()
    rank = {t: k for k, (kind, t) in enumerate(sig.values()) if kind == "PARAMETER"}
    if not sig:  # a TorchScript export: its initializers are in state_dict order (loaders/onnx_loader.py)
        rank = {t: k for k, t in enumerate(md.get("state_dict_order") or ())}

    def key(v):
        o = opd[v]
        return rank.get(o.name, rank.get(o.sources[0]) if len(o.sources) == 1 else None)
    known = [v for v in order if key(v) is not None]
    if len(known) < 2:
        return order
    ranked = iter(sorted(known, key=key))
    return [next(ranked) if key(v) is not None else v for v in order]


def cast_grad(x, y) -> bool:
    """Whether the gradient y hands on to x needs autograd's cast: float tensors of different dtypes."""
    floats = ("float16", "bfloat16", "float32", "float64")
    return x.dtype != y.dtype and x.dtype in floats and y.dtype in floats


def _a_view(op_type: str) -> bool:
    """The op's family says it is a view in eager (slice, transpose, expand): it makes no tensor."""
    f = ops.profile_facts("torch", op_type)
    return isinstance(f, dict) and bool(f.get("view"))


def _held_bytes(o) -> int:
    """Bytes eager holds for a constant: a broadcast memplan folded (`Operand.broadcast_of`: an expand of
    a module buffer, a stride-0 view in eager) holds only the values it repeats."""
    if o.broadcast_of is not None:
        return elements(o.broadcast_of) * dtype_size(o.dtype)
    return o.nbytes
