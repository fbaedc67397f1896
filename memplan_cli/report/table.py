"""The terminal view (rich): the category table in the spirit of onert's ALLOC lines, the summary
lines under it, onert's own ALLOC listing, the per-layer table, diff and sweep tables."""
from __future__ import annotations

import io
import re

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from memplan_cli.buffers import CATEGORIES
from memplan_cli.report.base import Reporter
from memplan_cli.report.output import RenderOptions
from memplan_cli.report.sparkline import sparkline
from memplan_cli.report.units import human

LABELS = {"non-const": "non-const", "trainable": "trainable", "back-prop": "back-prop", "gradient": "gradient",
          "opt-variable": "opt variable", "disposable": "disposable", "extra": "extra"}


def fig(n: int | None) -> str:
    """Exact bytes and human units in one cell: `11,360,128  10.83 MiB`."""
    if n is None:
        return "n/a"
    return f"{n:,d}  {human(n)}" if n >= 1024 else f"{n:,d}  B"


LAYER_HEADERS = {"activations": "act", "kept_for_backward": "kept", "weights": "weights", "back-prop": "bp",
                 "gradient": "grad", "opt-variable": "opt", "other": "other", "at_peak": "peak",
                 "fwd_mem_out": "fwd out", "fwd_mem_tmp": "fwd tmp", "bwd_mem_tmp": "bwd tmp", "bwd_mem_out": "bwd out"}
LAYER_LEGEND = ("act: outputs of the op; kept: of those, alive after the forward pass; bp: back-props; "
                "grad: gradients; opt: optimizer state; other: disposable + extra buffers; peak: its buffers "
                "live at the peak step")


def short(n: int) -> str:
    """Compact units for the per-layer table: `18.2K`, `182K`, `10.8M` (binary), `-` for zero."""
    if not n:
        return "-"
    for unit, size in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if abs(n) >= size:
            v = n / size
            return f"{v:.0f}{unit}" if abs(v) >= 99.95 else f"{v:.1f}{unit}"
    return str(n)


def short_units(n: int) -> str:
    """`short` where a zero is a figure (0), not an empty cell, and None is n/a."""
    if n is None:
        return "n/a"
    return short(n) if n else "0"


def flops_short(n: int) -> str:
    """FLOPs in decimal units: `1.2G`, `310M`, `-` for zero."""
    if not n:
        return "-"
    for unit, size in (("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            v = n / size
            return f"{v:.0f}{unit}" if v >= 99.95 else f"{v:.1f}{unit}"
    return str(n)


def flops_line(fl: dict) -> str:
    """The step's FLOPs in one line, or why there is no figure."""
    if not fl.get("available"):
        return f"FLOPs: n/a ({fl.get('reason', '')})"
    return (f"FLOPs per training step: {fl['step']:,d} ({flops_short(fl['step'])}): forward "
            f"{flops_short(fl['forward'])}, backward {flops_short(fl['backward'])}, optimizer "
            f"{flops_short(fl['optimizer'])}")


STATUS_WORDS = {"optimal": "optimal (proven: no plan that recomputes any forward op any number of times is cheaper)",
                "feasible": "feasible (no optimality proof)"}


def _status(r: dict) -> str:
    if r["status"] == "feasible" and "added_flops_lower_bound" in r:
        gap = r["added_flops"] - r["added_flops_lower_bound"]
        return (f"feasible, within {flops_short(gap)} FLOPs of the bound (no plan fits below "
                f"{r['flops_ratio_lower_bound']:.3f} x the step's FLOPs, proven)")
    return STATUS_WORDS.get(r["status"], r["status"])


def _names(items: list, k: int = 8) -> str:
    more = f", ... ({len(items) - k} more)" if len(items) > k else ""
    return ", ".join(items[:k]) + more


def remat_lines(r: dict) -> list[str]:
    """The budgeted analysis in a few lines: what fits at which compute, or why nothing does."""
    head = f"remat under {human(r['budget'])} ({r['budget']:,d} B): "
    if not r["fits"]:
        what = "planned" if r.get("reachable_kind") == "arena" else "live at its peak"
        return [head + ("nothing fits, proven" if r["status"] == "infeasible" else
                        "no plan found (not proven that none fits)"),
                f"  smallest found: {r['reachable']:,d} B ({human(r['reachable'])}) {what}, recomputing "
                f"{len(r['reachable_ops'])} op(s)" + (
                    f"; no plan goes below {r['reachable_lower_bound']:,d} B ({human(r['reachable_lower_bound'])}), "
                    "proven" if "reachable_lower_bound" in r else ""),
                f"  floor: {r['floor']:,d} B ({human(r['floor'])}): persistent state plus what one step needs "
                f"whatever is recomputed (its working set and the values no recompute can replace), at "
                f"{r['floor_step']}; no plan goes below it, proven"] + [f"  note: {n}" for n in r.get("notes", [])]
    if not r["recomputed_ops"]:
        return [head + f"fits without recomputation (planned {human(r['arena'])})"]
    added, step = r["added_flops"], r["step_flops"]
    out = [head + f"fits: planned {r['arena']:,d} B ({human(r['arena'])}), FLOPs {r['flops_ratio']:.3f} x the step "
           f"(+{flops_short(added)} of {flops_short(step)}), plan {_status(r)}, "
           f"{r['evaluations']} plans scored",
           f"  recomputed before backward: {len(r['recomputed_ops'])} op(s): {_names(r['recomputed_ops'])}"]
    if r.get("recomputed_tensors"):
        out.append(f"  recomputed tensors: {len(r['recomputed_tensors'])} (named in the JSON report, remat.recomputed_tensors)")
    out += [f"  note: {n}" for n in r.get("notes", [])]
    return out


def fitted(con: Console, variants) -> tuple[Table, int]:
    """The first of `variants` (callables building the same table, from the fullest to the most
    compact) whose natural width fits the console, and its index; the last one when none does.
    This is how a table meets a narrow terminal: by dropping detail in a designed order (exact bytes
    first), never by rich cutting a cell to a digit and an ellipsis."""
    table = None
    for k, build in enumerate(variants):
        table = build()
        if natural_width(con, table) <= con.width:
            return table, k
    return table, len(variants) - 1


def natural_width(con: Console, table: Table) -> int:
    """The width `table` takes when nothing limits it (a measure at the console's own width is capped there)."""
    return con.measure(table, options=con.options.update_width(1 << 16)).maximum


def exact_note(con: Console, wide_table: Table) -> Text:
    """The line under a table whose cells dropped their exact bytes to fit."""
    return Text(f"sizes rounded to fit {con.width} columns; exact bytes: -f json, -f csv or "
                f"COLUMNS={natural_width(con, wide_table)}", style="dim")


def _op_table(title: str, op_width: int | None) -> Table:
    """A per-op table: the op column first (wrapped to `op_width`, folding a long name onto more
    lines: the figures beside it are never cut), the caller's figure columns after it."""
    table = Table(title=title or None, header_style="bold", title_justify="left", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False, collapse_padding=True)
    table.add_column("op", overflow="fold", width=op_width)
    return table


def op_column_width(con: Console, build, least: int = 12) -> int | None:
    """The width of the first column of `build(width)` that makes the table fit the console: all the
    room the other columns leave (at least `least`), or None (its natural width) when it fits as is."""
    if natural_width(con, build(None)) <= con.width:
        return None
    rest = natural_width(con, build(1)) - 1
    return max(least, con.width - rest)


def ratio(a: int, b: int) -> str:
    return f"{a / b:.3f}" if b else "n/a"


# A figure and its unit ("1.53 MiB", "38.5 %", "0.615 x") are one word to the line wrap: the space
# between them is written as a private-use character while rich wraps, and put back after.
_GLUE = "\ue000"
_FIGURE_UNIT = re.compile(r"(\d[\d,]*(?:\.\d+)?) (B|KiB|MiB|GiB|TiB|kB|KB|MB|GB|TB|%|x|ms|s)\b")


def _glued(obj):
    # a file's own private-use character is written as its escape, so `text()` cannot turn it into a space
    if isinstance(obj, str):
        return _FIGURE_UNIT.sub(rf"\1{_GLUE}\2", obj.replace(_GLUE, "\\ue000"))
    if not isinstance(obj, Text):
        return obj
    if _GLUE in obj.plain:  # rare: the spans would shift, so the line keeps its base style only
        obj = Text(obj.plain.replace(_GLUE, "\\ue000"), style=obj.style)
    glued = _FIGURE_UNIT.sub(rf"\1{_GLUE}\2", obj.plain)
    if glued != obj.plain:
        obj = obj.copy()
        obj.plain = glued  # same length: the styles' spans stay where they were
    return obj


class _ProseConsole(Console):
    """A console whose prose lines never part a figure from its unit; `text()` is what it wrote."""

    def print(self, *objects, **kwargs) -> None:  # noqa: A003 - rich's own name
        super().print(*(_glued(o) for o in objects), **kwargs)

    def text(self) -> str:
        return self.file.getvalue().replace(_GLUE, " ")


def _console(opts: RenderOptions) -> _ProseConsole:
    # markup off: a file's own names may hold rich's brackets ('[/]' raised MarkupError, '[bold]' vanished)
    return _ProseConsole(file=io.StringIO(), width=opts.width, force_terminal=opts.color, no_color=not opts.color,
                         color_system="standard" if opts.color else None, highlight=False, emoji=False,
                         markup=False, legacy_windows=False, soft_wrap=False)


def _config_line(doc: dict) -> str:
    c = doc["config"]
    m = doc["model"]
    batch = c["batch_size"] if c["batch_size"] is not None else f"{m.get('batch_size')} (the model's)"
    tr = c["trainable_ops"]
    tr = ",".join(map(str, tr)) if isinstance(tr, list) else tr
    planner = f" · planner {c['planner']}" if c.get("planner") else ""
    opts = "".join(f" · {k} {v}" for k, v in c.get("profile_options", {}).items())
    peft = fine_tuning_part(c)
    return (f"{m['file']} ({m.get('format') or '?'}, {m.get('operations', 0)} ops) · profile {doc['profile']}"
            f" · batch {batch}{dims_part(c)}{precision_part(c)} · {c['optimizer']} · {c['loss']}{_loss_on(c)} · trainable {tr}{peft}"
            f"{planner}{opts}")


def precision_part(c: dict) -> str:
    """` · bf16-mixed`: the precision of a report's config; nothing at 32-true (float32 throughout, as
    every report before --precision was)."""
    p = c.get("precision") or "32-true"
    return "" if p == "32-true" else f" · {p}"


def dims_part(c: dict) -> str:
    """` · seq=512`: the symbolic dimensions a report's config bound (--dim)."""
    return "".join(f" · {k}={v}" for k, v in (c.get("dims") or {}).items())


def _torch_coverage(doc: dict) -> dict:
    """`figures.torch.coverage` of a report, or {} (another profile's report)."""
    return ((doc.get("figures") or {}).get("torch") or {}).get("coverage") or {}


def _said(doc: dict, key: str) -> str:
    """The sentence the torch profile wrote for coverage[key] (`.note`) with its JSON pointer, where
    the profile says it is a large enough share of the peak for the header (`.says_so`)."""
    part = _torch_coverage(doc).get(key) or {}
    return f"{part['note']} (JSON figures.torch.coverage.{key})" if part.get("says_so") else ""


def _said_alone(doc: dict, key: str) -> str:
    """`_said` without the JSON pointer: the sentence the profile wrote for coverage[key], where it
    says so (`""` where it wrote none: no peak to compare with)."""
    part = _torch_coverage(doc).get(key) or {}
    return part.get("note", "") if part.get("says_so") else ""


def torch_estimate_note(doc: dict) -> str:
    """The torch profile's header line when ops without a measured rule hold a share of the peak
    (`figures.torch.coverage.says_so`): those ops, by type, and their bytes there."""
    cov = _torch_coverage(doc)
    if not cov.get("says_so"):
        return ""
    types = sorted({e["type"] for e in cov["estimated"]})
    why = "no measured rule covers"
    if cov.get("as_functions"):
        why += " or a custom autograd Function may have run"
    line = (f"estimated: {100 * cov['estimated_share']:.1f} % of the peak "
            f"({cov['estimated_bytes_at_peak']:,d} B) is from {len(cov['estimated'])} op(s) {why} "
            f"({', '.join(types)}; JSON figures.torch.coverage)")
    for reason in cov.get("reasons") or ():  # a family's reason, written by the profile
        line += "; " + reason
    loop = cov.get("as_loop") or {}
    if loop.get("note"):
        line += "; " + loop["note"]
    return line


def torch_folded_note(doc: dict) -> str:
    """The torch profile's header line when eager ops on constants that memplan folded at load make a
    share of the peak it does not count: the sentence the profile wrote
    (`figures.torch.coverage.not_counted.note`, printed when `says_so`)."""
    return _said(doc, "not_counted")


def torch_cache_note(doc: dict) -> str:
    """The torch profile's header line when convolutions' scratch that oneDNN's cache model sizes from the
    CPU's L2 is a share of the peak: the sentence the profile wrote, naming the CPU it assumes
    (`figures.torch.coverage.cache_sized.note`, printed when `says_so`)."""
    return _said(doc, "cache_sized")


def torch_held_note(doc: dict) -> str:
    """The torch profile's header line when ops a dynamo file records under one source line each (a
    called function whose own lines it does not record) would hold a share of the peak more had every
    tensor they make lived until they return: the sentence the profile wrote
    (`figures.torch.coverage.as_held.note`, printed when `says_so`)."""
    return _said(doc, "as_held")


def torch_unread_note(doc: dict) -> str:
    """The torch profile's header line when the dynamo graph signature lists parameters of modules no
    op of the file reads: the sentence the profile wrote (`figures.torch.coverage.unread_note`)."""
    cov = _torch_coverage(doc)
    note = cov.get("unread_note")
    keys = [k for k in ("unread_parameters", "tied_parameters") if cov.get(k)]
    return f"{note} (JSON {', '.join('figures.torch.coverage.' + k for k in keys)})" if note else ""


def torch_composite_note(doc: dict) -> str:
    """The torch profile's header line when the file is the language part of a composite model and does
    not list the other parts' parameters (`figures.torch.coverage.composite.note`: a TorchScript export;
    a dynamo file's unread line names them)."""
    return (_torch_coverage(doc).get("composite") or {}).get("note") or ""


def torch_estimated_parameters_note(doc: dict) -> str:
    """The torch profile's header line when parameters were run again from a constant the exporter
    folded of the part its ops read (a position table folded to the rows read): the sentence the
    profile wrote (`figures.torch.coverage.estimated_parameters_note`)."""
    note = _torch_coverage(doc).get("estimated_parameters_note")
    return f"{note} (JSON figures.torch.coverage.estimated_parameters)" if note else ""


def torch_constant_layers_note(doc: dict) -> str:
    """The torch profile's header line when trained layers read a constant of a batch's shape instead
    of anything computed from the model's input: a tensor the module made each step; made requiring
    grad (transformers MRA's fallback without its CUDA kernel), eager holds it and its gradient through
    the step, which the file cannot say. The sentence the profile wrote
    (`figures.torch.coverage.constant_layers.note`, printed when `says_so`)."""
    return _said(doc, "constant_layers")


def torch_contiguous_note(doc: dict) -> str:
    """The torch profile's header line when transposed tensors a reshape reads as a view would have been
    copied by a `.contiguous()` a TorchScript file does not record, for a share of the peak
    (`figures.torch.coverage.contiguous.says_so`): the sentence the profile wrote (`.note`)."""
    return _said(doc, "contiguous")


def torch_copied_views_note(doc: dict) -> str:
    """The torch profile's header line when the model's output viewing a larger tensor, or a broadcast view
    handed to several submodules, copied by a `.contiguous()` a TorchScript file does not record, would
    change the peak by a share of it (`figures.torch.coverage.copied_views.says_so`): the sentence the
    profile wrote (`.note`)."""
    return _said(doc, "copied_views")


def torch_causal_tables_note(doc: dict) -> str:
    """The torch profile's header line when a TorchScript file's folded (T, T) masks may be slices of
    modules' causal tables that eager holds, for a share of the peak
    (`figures.torch.coverage.causal_tables.says_so`): the sentence the profile wrote (`.note`)."""
    return _said(doc, "causal_tables")


def torch_fixed_tables_note(doc: dict) -> str:
    """The torch profile's header line when the tables read at fixed rows, counted as trained, would
    change the peak by a share of it frozen (`figures.torch.coverage.fixed_tables.says_so`): the
    sentence the profile wrote (`.note`); the command that freezes them follows ("note: if ...")."""
    return _said(doc, "fixed_tables")


def torch_functions_as_ops_note(doc: dict) -> str:
    """The torch profile's header line when custom autograd Functions a dynamo file records, counted as
    saving only their inputs, would change the peak by a share had they saved their ops' intermediates
    (`figures.torch.coverage.functions_as_ops.note`, printed when `says_so`)."""
    return _said_alone(doc, "functions_as_ops")


def torch_functions_note(doc: dict) -> str:
    """The torch profile's header line when written-out formulas a custom autograd Function may have
    run (a TorchScript export cannot tell) change the peak: the sentence the profile wrote
    (`figures.torch.coverage.as_functions.note`, printed when `says_so`)."""
    return _said_alone(doc, "as_functions")


def torch_no_grad_note(doc: dict) -> str:
    """The torch profile's header line when ops a dynamo export inlined from the body of a `with` block
    (no_grad, enable_grad or autocast: the file does not say which) change the peak if it was no_grad:
    the sentence the profile wrote (`figures.torch.coverage.as_no_grad.note`, printed when `says_so`)."""
    return _said_alone(doc, "as_no_grad")


def fine_tuning_part(c: dict) -> str:
    """` · train ... · freeze ... · LoRA rank R on ...`: the fine-tuning setup of a report's config."""
    part = "".join(f" · {flag} {','.join(c[flag])}" for flag in ("train", "freeze") if c.get(flag))
    if c.get("lora"):
        part += f" · LoRA rank {c['lora']['rank']}" + (f" on {','.join(c['lora']['targets'])}" if c["lora"]["targets"]
                                                      else " on the default targets")
    return part


def _loss_on(c: dict, shown: int = 6) -> str:
    """` on OUT1, OUT2` naming the outputs that carry a loss (a summed loss when several)."""
    names = c.get("loss_outputs") or []
    if not names:
        return ""
    more = f" and {len(names) - shown} more (JSON config.loss_outputs)" if len(names) > shown else ""
    lead = f" summed over {len(names)} outputs: " if len(names) > 1 else " on "
    return lead + ", ".join(names[:shown]) + more


def _signed(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n:+,d}  ({'+' if n > 0 else '-' if n < 0 else '±'}{human(abs(n))})"


def _signed_human(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{'+' if n > 0 else '-' if n < 0 else '±'}{human(abs(n))}"


def _human_or_na(n: int | None) -> str:
    return "n/a" if n is None else human(n)


def _pct(p: float | None) -> str:
    return "n/a" if p is None else f"{p:+.2f}%"



def time_limit_note(doc: dict) -> str:
    """The warning a report carries when the user gave --time-limit ("" otherwise)."""
    tl = (doc.get("config") or {}).get("time_limit")
    if tl is None:
        return ""
    return (f"planned under a {tl:g} s time limit: the plan may depend on this machine's speed and load "
            "(without --time-limit every budget counts work, and the same input gives the same plan)")

def train_from_file_note(doc: dict) -> str:
    """The note a report carries when the file, not a flag, said which weights train (an ONNX export
    holding peft's LoRA adapters: loaders/params.py)."""
    c = doc.get("config") or {}
    if (c.get("sources") or {}).get("train") != "metadata" or not c.get("train"):
        return ""
    return (f"the file holds peft LoRA adapters: only they train ({', '.join(c['train'])}), as peft trains them; "
            "--train overrides")


def assumed_note(doc: dict) -> str:
    """The note naming the weights that train although the file could not tell they are parameters."""
    names = (doc.get("parameters") or {}).get("assumed_trainable") or []
    if not names:
        return ""
    folded = (doc.get("parameters") or {}).get("assumed_from") or {}
    computed_from = sorted({t for ts in folded.values() for t in ts})
    origin = f"; {len(folded)} of them computed from {_names(computed_from, 2)}" if computed_from else ""
    return (f"{len(names)} weight(s) assumed trainable: the file does not tell whether they are parameters of "
            f"the source model ({_names(names, 3)}{origin}; all in the JSON report, parameters.assumed_trainable); "
            "--freeze params:GLOB keeps them frozen")


def fixed_table_command(doc: dict, command) -> tuple[str, str]:
    """(what it applies to, the command) for the position tables among what trains by assumption
    (`parameters.read_at_fixed_rows`: a weight read only at fixed rows, or a parameter whose rows at
    fixed positions were folded into an assumed constant). Eager may keep such a table frozen
    (RoFormer's sinusoidal one) and the file does not say which, so the line says "if"; the command is
    `command` (RenderOptions.command: `memplan analyze` as run) with those tables frozen, and runs as
    printed.
    ("", "") when there is no such table, no command, or --freeze froze them all already."""
    p = doc.get("parameters") or {}
    if not p.get("assumed_trainable") or command is None:
        return "", ""
    tables = sorted(set(p.get("read_at_fixed_rows") or ()))
    given = tuple((doc.get("config") or {}).get("freeze") or ())
    fresh = tuple(f"params:{t}" for t in tables if f"params:{t}" not in given)
    if not fresh:
        return "", ""
    which, it = ((f"{tables[0]} does", "it") if len(tables) == 1 else
                 (f"the tables read at fixed rows ({_names(tables, 3)}) do", "them"))
    return (f"if {which} not train in the source model (a fixed table, as a sinusoidal one), this counts "
            f"{it} frozen:", command({"freeze": given + fresh}))


def own_rule_lines(figures: dict) -> list[str]:
    """What the own plan does that an eager runtime does not, named (profiles/memplan.py
    own_rule_figures): forward results recomputed before backward, broadcasts held as their values."""
    out = []
    rec = figures.get("recomputed")
    if rec:
        share = f", +{100 * rec['share']:.1f}% of the step's FLOPs" if "share" in rec else ""
        out.append(f"recomputed before backward instead of kept: {len(rec['results'])} forward result(s) "
                   f"({flops_short(rec['flops'])} FLOPs{share}): {_names(rec['results'], 3)} "
                   "(all in the JSON report, figures.recomputed)")
    bv = figures.get("broadcast_views")
    if bv:
        out.append(f"broadcast views: {len(bv['constants'])} constant(s) folded from a broadcast hold only the "
                   f"values they repeat ({human(bv['saved'])} less): {_names(bv['constants'], 3)} "
                   "(all in the JSON report, figures.broadcast_views)")
    return out


def data_sized_note(doc: dict) -> str:
    """The note naming the assumption under which sizes the data decides were taken."""
    ds = doc.get("data_sized")
    if not ds:
        return ""
    dims = ds["dims"]
    given = sum(1 for d in dims if d["set_by"] == "--dim")
    how = f"assumed {ds['rule']}" + (f", {given} set by --dim" if given else "")
    return f"{len(dims)} data-sized dims {how} ({ds['tensors']} tensors); --dim {dims[0]['name']}=N"


def merged_norm_note(doc: dict) -> str:
    """The note naming normalisations whose scale and shift a converter merged into the next layer."""
    merged = (doc.get("parameters") or {}).get("merged_normalizations") or []
    if not merged:
        return ""
    m = merged[0]
    first = f"{m['norm']} at op {m['op'].split(' ')[0]} feeds {', '.join(m['into'])}"
    more = f" and {len(merged) - 1} more (parameters.merged_normalizations in the JSON report)" if len(merged) > 1 else ""
    return (f"{len(merged)} normalisation(s) without a scale or shift of their own ({first}{more}): a converter "
            "merges those into the next layer's weight and bias (litert-torch does), so they get no gradient of "
            "their own")


class TableReporter(Reporter):
    name = "table"

    # ---- analyze ----------------------------------------------------------------------------
    def analysis(self, doc: dict, opts: RenderOptions) -> str:
        if opts.verbosity <= -1:
            return ""
        if opts.verbosity == 0:
            return self._quiet_line(doc) + "\n"
        con = _console(opts)
        con.print(Text(_config_line(doc), style="bold"))
        for est in (torch_estimate_note(doc), torch_folded_note(doc), torch_cache_note(doc),
                    torch_functions_note(doc), torch_functions_as_ops_note(doc),
                    torch_no_grad_note(doc), torch_held_note(doc), torch_unread_note(doc), torch_composite_note(doc),
                    torch_estimated_parameters_note(doc), torch_constant_layers_note(doc),
                    torch_contiguous_note(doc), torch_copied_views_note(doc),
                    torch_causal_tables_note(doc), torch_fixed_tables_note(doc)):
            if est:
                con.print(Text(est, style="bold yellow"))
        note = time_limit_note(doc)
        if note:
            con.print(Text(f"note: {note}", style="yellow"))
        for note in (train_from_file_note(doc), assumed_note(doc), merged_norm_note(doc), data_sized_note(doc)):
            if note:
                con.print(Text(f"note: {note}", style="yellow"))
        what, cmd = fixed_table_command(doc, opts.command)
        if cmd:
            from memplan_cli.report.shell import shell_lines  # lazy: a report without the line does not load it

            con.print(Text(f"note: {what}", style="yellow"))
            for line in shell_lines(cmd, con.width, "  "):
                con.print(Text(line), overflow="ignore", crop=False, soft_wrap=True)
        if "alloc_lines" in doc:
            self._alloc_tables(con, doc)
        self._category_table(con, doc)
        self._summary(con, doc, opts)
        if "remat" in doc:
            for line in remat_lines(doc["remat"]):
                con.print(line)
        if "by_layer" in doc:
            self._layer_table(con, doc)
        if opts.verbosity >= 2:
            self._pools_table(con, doc)
            if opts.timings:
                t = " · ".join(f"{k} {v * 1000:.0f} ms" for k, v in opts.timings.items())
                con.print(Text(f"time: {t}", style="dim"))
            if opts.kernels:
                con.print(Text(f"planner kernels: {kernels_text(opts.kernels)}", style="dim"))
        return con.text()

    @staticmethod
    def _quiet_line(doc: dict) -> str:
        t = doc["totals"]
        line = f"{doc['model']['file']}: planned {t['planned']} B ({human(t['planned'])}), naive {t['naive']} B"
        if "onert" in t:
            line += f", onert {t['onert']} B"
        line += f", lower bound {t['lower_bound']} B"
        r = doc.get("remat")
        if r:  # the budget's answer belongs on the one line CI scripts read
            if r["fits"]:
                line += (f"; remat under {r['budget']} B: fits, FLOPs {r['flops_ratio']:.3f} x, "
                         f"{len(r['recomputed_ops'])} op(s) recomputed, {r['status']}")
            else:
                line += (f"; remat under {r['budget']} B: " + ("nothing fits, proven" if r["status"] == "infeasible"
                                                              else "no plan found")
                         + f", smallest found {r['reachable']} B")
        return line

    def _category_table(self, con: Console, doc: dict) -> None:
        has_onert = "onert" in doc["totals"]
        prof = doc["profile"]

        def build(cell):
            table = Table(title=None, header_style="bold", show_footer=True)
            table.add_column("category", footer="total", no_wrap=True)
            t = doc["totals"]
            table.add_column("naive", justify="right", footer=cell(t["naive"]), no_wrap=True)
            if has_onert:
                table.add_column("onert", justify="right", footer=cell(t["onert"]), no_wrap=True)
            table.add_column(f"{prof} planned", justify="right", footer=Text(cell(t["planned"]), style="bold green"))
            table.add_column("live at peak", justify="right", footer=cell(doc["peak"]["bytes"]), no_wrap=True)
            onert_cats = (doc.get("onert") or {}).get("categories", {})
            for c in CATEGORIES:
                row = doc["categories"][c]
                cells = [LABELS[c], cell(row["naive"])]
                if has_onert:
                    cells.append(cell(onert_cats.get(c, 0)))
                cells.append(cell(row["planned"]))
                cells.append(cell(doc["peak"]["categories"].get(c, 0)))
                table.add_row(*cells)
            return table

        variants = (lambda: build(fig), lambda: build(human))
        table, k = fitted(con, variants)
        con.print(table)
        if k:
            con.print(exact_note(con, variants[0]()))

    def _summary(self, con: Console, doc: dict, opts: RenderOptions) -> None:
        t = doc["totals"]
        planned, naive, lb = t["planned"], t["naive"], t["lower_bound"]
        prof = doc["profile"]
        lines = []
        if doc.get("forward_only"):
            lines.append("nothing trains (no weight gets a gradient): these figures are the forward pass and "
                         "the loss only")
        by_reason: dict[str, list] = {}
        for w in doc.get("frozen_weights") or []:
            by_reason.setdefault(w["reason"], []).append(w)
        for reason, fw in by_reason.items():  # one line per reason: each names its own weights
            names = ", ".join(w["weight"] for w in fw[:4]) + (f" and {len(fw) - 4} more" if len(fw) > 4 else "")
            lines.append(f"note: {len(fw)} weight(s) ({human(sum(w['bytes'] for w in fw))}) stay frozen: "
                         f"{reason}: {names} (JSON frozen_weights)")
        if naive:
            line = (f"{prof} planned vs naive: {human(planned)} vs {human(naive)}, "
                    f"{(naive - planned) * 100 / naive:.1f}% less ({ratio(planned, naive)} x)")
            folded = t.get("folded") or 0
            if folded and naive > planned:
                line += f": in-place and views {human(folded)}, reuse {human(naive - planned - folded)}"
            lines.append(line)
            if doc.get("naive_means"):
                lines.append(f"naive: {doc['naive_means']}")
        if "onert" in t and t["onert"]:
            o = t["onert"]
            lines.append(f"{prof} planned vs onert: {human(planned)} vs {human(o)}, "
                         f"{(o - planned) * 100 / o:.1f}% less ({ratio(planned, o)} x)")
        elif "onert" in doc and not doc["onert"]["available"]:
            lines.append(f"onert: n/a ({doc['onert']['reason']})")
        # a bound for placing these buffers (sizes, lifetimes, pools): not for training the model any
        # other way (another schedule, other in-place rules, recomputation)
        lines.append(f"lower bound: {lb:,d} B ({human(lb)}) for placing these buffers as they are sized and live "
                     f"here; arena / lower bound = {ratio(planned, lb)}")
        sg = (doc.get("figures") or {}).get("singa")
        if sg:
            how = "online first fit, no plan" if sg.get("planner") == "singa" else f"planner {sg.get('planner')}"
            lines.append(f"singa pool ({how}): high-water {human(sg['high_water'])}, "
                         f"fragmentation {sg['fragmentation']:.4f} (high-water / lower bound, "
                         f"{human(sg['lost_bytes'])} lost to holes)")
        pk = doc["peak"]
        if pk.get("domains"):
            parts = ", ".join(f"{LABELS[c]} {human(v)}" for c, v in pk["categories"].items() if v)
            lines.append(f"peak: {human(pk['bytes'])} live, the sum of {len(pk['domains'])} time domains' own "
                         f"peaks (each pool counts its own events; no step is shared) ({parts})")
        elif pk["step"] >= 0:
            parts = ", ".join(f"{LABELS[c]} {human(v)}" for c, v in pk["categories"].items() if v)
            where = f"step {pk['step_label']}" + (f" in {pk['op']}" if pk["op"] else "")
            lines.append(f"peak: {human(pk['bytes'])} live at {where} ({parts})")
        lines += own_rule_lines(doc.get("figures") or {})
        for line in lines:
            con.print(line)
        if len(opts.live_by_domain) > 1:
            # a sparkline per time domain that has a shape (more than one step)
            for name, vals in opts.live_by_domain:
                if len(vals) > 1:
                    con.print(f"live over {len(vals)} events of {name}: "
                              f"{sparkline(vals, min(80, opts.width - 40))}")
        elif opts.live_total:
            con.print(f"live over {len(opts.live_total)} steps: {sparkline(opts.live_total, min(80, opts.width - 30))}")

    def _alloc_tables(self, con: Console, doc: dict) -> None:
        table = Table(title="onert ALLOC lines, in onert's order", header_style="bold",
                      show_footer=True, title_justify="left")
        caps = doc["alloc_lines"]
        labels = doc.get("alloc_labels") or [f"line {k + 1}" for k in range(len(caps))]
        table.add_column("#", justify="right")
        table.add_column("ALLOC line", footer="total")
        table.add_column("allocation capacity", justify="right", footer=fig(sum(caps)))
        for k, (label, cap) in enumerate(zip(labels, caps)):
            table.add_row(str(k + 1), label, fig(cap))
        con.print(table)
        if doc.get("one_style"):
            g = Table(title="grouped as ONE publishes them", header_style="bold",
                      show_footer=True, title_justify="left")
            g.add_column("group", footer="total")
            g.add_column("bytes", justify="right", footer=fig(sum(doc["one_style"].values())))
            for name, v in doc["one_style"].items():
                g.add_row(name, fig(v))
            con.print(g)

    def _layer_table(self, con: Console, doc: dict) -> None:
        bl = doc["by_layer"]
        flops_cols = [c for c in bl["columns"] if c.endswith("_flops")]
        cols = [c for c in bl["columns"] if c not in flops_cols]
        top = bl.get("largest_at_peak")
        dtypes = any("dtype" in row for row in bl["rows"])  # mixed precision: dtypes differ op to op

        def build(title, some, op_width=None):
            table = _op_table(title, op_width)
            if dtypes:
                table.add_column("dtype", no_wrap=True)
            for c in some:
                table.add_column(LAYER_HEADERS.get(c, c.replace("_", " ")), justify="right", no_wrap=True)
            for row in bl["rows"]:
                style = "bold yellow" if row["op"] == top else None
                lead = [row["op"]] + ([row.get("dtype", "")] if dtypes else [])
                table.add_row(*lead, *(short(row.get(c, 0)) for c in some), style=style)
            return table

        # one table when it fits; else the categories and the per-node figures (ColossalAI's) apart,
        # each with the op names wrapped in the room the figures leave
        own = [c for c in cols if c in LAYER_HEADERS and not c.startswith(("fwd_mem", "bwd_mem"))]
        groups = [("per layer (bytes)", cols)]
        if natural_width(con, build("", cols)) > con.width and own != cols:
            groups = [("per layer (bytes)", own),
                      ("per layer (bytes, per-node figures)", [c for c in cols if c not in own])]
        for title, some in groups:
            con.print(build(title, some, op_column_width(con, lambda w, some=some: build(title, some, w))))
        legend = LAYER_LEGEND
        if dtypes:
            legend += "; dtype: the op's output (float32 where autocast keeps it, else the low dtype)"
        if any(c.startswith(("fwd_mem", "bwd_mem")) for c in cols):
            legend += "; fwd/bwd out/tmp: ColossalAI's per-node figures"
        con.print(Text(legend, style="dim"))
        if top:
            con.print(f"largest share of the peak: {top}")
        if flops_cols:
            self._flops_table(con, bl, doc["flops"])
        elif "flops" in doc:
            con.print(flops_line(doc["flops"]))

    @staticmethod
    def _flops_table(con: Console, bl: dict, fl: dict) -> None:
        step = fl["step"] or 1

        def build(op_width=None):
            table = _op_table("per layer (FLOPs)", op_width)
            for name in ("forward", "backward", "share"):
                table.add_column(name, justify="right", no_wrap=True)
            for row in bl["rows"]:
                f, b = row.get("fwd_flops", 0), row.get("bwd_flops", 0)
                if f or b:
                    table.add_row(row["op"], flops_short(f), flops_short(b), f"{(f + b) * 100 / step:.1f}%")
            return table

        con.print(build(op_column_width(con, build)))
        con.print(Text("forward: every run of the op's forward step; share: of the step's FLOPs; decimal units",
                       style="dim"))
        con.print(flops_line(fl))

    def _pools_table(self, con: Console, doc: dict) -> None:
        table = Table(title="pools (arenas)", header_style="bold", title_justify="left")
        for name, j in (("pool", "left"), ("category", "left"), ("planner", "left"), ("status", "left"),
                        ("buffers", "right"), ("arena", "right"), ("lower bound", "right")):
            table.add_column(name, justify=j)
        for p in doc["pools"]:
            table.add_row(p["name"], p["category"], p["planner"], p.get("status", ""), str(p["buffers"]),
                          fig(p["arena"]), fig(p["lower_bound"]))
        con.print(table)
        if any(p.get("status") == "optimal" for p in doc["pools"]):
            con.print("optimal: no placement of that pool's buffers, as sized and live here, takes a smaller arena "
                      "(its arena meets its lower bound, or the exact search proved it)")

    # ---- diff --------------------------------------------------------------------------------
    def diff(self, doc: dict, opts: RenderOptions) -> str:
        if opts.verbosity <= -1:
            return ""
        bad = [t for t in doc["thresholds"] if not t["passed"]]
        if opts.verbosity == 0:
            tot = next((r for r in doc["rows"] if r["section"] == "total" and r["name"] == "planned"), None)
            line = f"{doc['status']}: planned {tot['old']} -> {tot['new']} B ({_pct(tot['percent'])})" if tot else doc["status"]
            if bad:
                line += "; failed " + ", ".join(t["threshold"] for t in bad)
            return line + "\n"
        con = _console(opts)
        b, t = doc["baseline"], doc["target"]
        con.print(Text(f"baseline {b['source']} ({b['profile']})  ->  target {t['source']} ({t['profile']})", style="bold"))
        for note in doc["notes"]:
            con.print(Text(f"note: {note}", style="yellow"))

        def build(cell, signed, boxed=True):
            table = (Table(header_style="bold") if boxed else
                     Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                           collapse_padding=True))
            for name, j in (("", "left"), ("old", "right"), ("new", "right"), ("delta", "right"), ("%", "right"),
                            ("threshold", "left")):
                table.add_column(name, justify=j, no_wrap=True)
            for r in doc["rows"]:
                if r["section"] == "total" and r["name"] == "naive":
                    table.add_section()
                name = LABELS.get(r["name"], r["name"]) if r["section"] == "category" else f"total {r['name']}"
                delta_style = "red" if (r["delta"] or 0) > 0 else "green" if (r["delta"] or 0) < 0 else None
                status = {"regression": Text("FAIL", style="bold red"),
                          "ok": Text("ok", style="green")}.get(r["status"], "")
                table.add_row(name, cell(r["old"]), cell(r["new"]), Text(signed(r["delta"]), style=delta_style or ""),
                              _pct(r["percent"]), status)
            return table

        variants = (lambda: build(fig, _signed), lambda: build(_human_or_na, _signed_human),
                    lambda: build(_human_or_na, _signed_human, boxed=False))
        table, k = fitted(con, variants)
        con.print(table)
        if k:
            con.print(exact_note(con, variants[0]()))
        for v in doc["thresholds"]:
            mark = Text("pass", style="green") if v["passed"] else Text("FAIL", style="bold red")
            con.print(Text.assemble("threshold ", v["threshold"], ": ", mark))
        con.print(Text(f"status: {doc['status']}", style="bold red" if doc["status"] != "ok" else "bold green"))
        return con.text()


    # ---- sweep -------------------------------------------------------------------------------
    def sweep(self, doc: dict, opts: RenderOptions) -> str:
        if opts.verbosity <= -1:
            return ""
        from memplan_cli.report.sweep import swept_value  # lazy: `memplan analyze -q` does not load it

        budget = doc["budget"]
        profiles = doc["profiles"]
        answer = doc["largest_fitting"]
        swept = doc["config"].get("swept_dim")  # --dim NAME=LIST: NAME's sizes instead of batches
        what = swept or "batch"
        unable = {p for p in profiles if all(r["planned"] is None for r in doc["rows"] if r["profile"] == p)}
        if opts.verbosity == 0:  # one line per profile
            lines = []
            for p in profiles:
                if p in unable:
                    lines.append(f"{p}: n/a")
                elif budget is None:
                    rows = sorted((r for r in doc["rows"] if r["profile"] == p), key=lambda r: swept_value(r, swept))
                    lines.append(f"{p}: " + ", ".join(
                        f"{what} {swept_value(r, swept)} {r['planned']} B" if r["planned"] is not None
                        else f"{what} {swept_value(r, swept)} n/a" for r in rows))
                elif answer.get(p) is not None:
                    lines.append(f"{p}: largest {what} under {budget} B: {answer[p]}")
                else:
                    lines.append(f"{p}: no {what} fits {budget} B")
            return "\n".join(lines) + "\n"
        con = _console(opts)
        c = doc["config"]
        fixed = f" · batch {c['batch_sizes'][0]}" if swept else ""
        bound = dims_part({"dims": {k: v for k, v in (c.get("dims") or {}).items() if k != swept}})
        con.print(Text(f"{doc['model']['file']}{fixed}{bound}{precision_part(c)} · {c['optimizer']} · {c['loss']}{_loss_on(c)} · "
                       f"trainable {c['trainable_ops']}"
                       + (f" · budget {budget:,d} B ({human(budget)})" if budget is not None else ""), style="bold"))
        if time_limit_note(doc):
            con.print(Text(f"note: {time_limit_note(doc)}", style="yellow"))

        def build(cell, boxed=True):
            table = (Table(header_style="bold") if boxed else
                     Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                           collapse_padding=True))
            sep = " " if boxed else "\n"  # the narrow variants head each column on two lines
            table.add_column(what, justify="right", no_wrap=True)
            for p in profiles:
                table.add_column(f"{p}{sep}planned", justify="right", no_wrap=True)
            table.add_column(f"{profiles[0]}{sep}lower bound", justify="right", no_wrap=True)
            by = {(r["profile"], swept_value(r, swept)): r for r in doc["rows"]}
            batches = sorted({swept_value(r, swept) for r in doc["rows"]})
            for b in batches:
                cells = [str(b)]
                for p in profiles:
                    r = by.get((p, b))
                    if r is None:
                        cells.append("")
                    elif r["planned"] is None:
                        cells.append(Text("n/a", style="dim"))
                    else:
                        style = "" if r.get("fits") is None else ("green" if r["fits"] else "red")
                        cells.append(Text(cell(r["planned"]), style=style))
                first = by.get((profiles[0], b))
                cells.append(cell(first["lower_bound"]) if first and first["lower_bound"] is not None else "")
                table.add_row(*cells)
            return table

        variants = (lambda: build(fig), lambda: build(human), lambda: build(human, boxed=False),
                    lambda: build(short_units, boxed=False))
        table, k = fitted(con, variants)
        con.print(table)
        if k:
            con.print(exact_note(con, variants[0]()))
        if k == len(variants) - 1:
            con.print(Text("K, M, G: KiB, MiB, GiB", style="dim"))
        errors = {}
        for r in doc["rows"]:
            if r.get("error"):
                errors.setdefault(r["profile"], r["error"])
        for p, e in errors.items():
            con.print(Text(f"{p}: n/a ({e})", style="yellow"))
        if budget is not None:
            for p in profiles:
                best = answer.get(p)
                if p in unable:
                    continue  # its n/a line above says why: no batch is an answer it can give
                if best is None:
                    con.print(Text(f"{p}: no {what} fits {human(budget)}", style="bold red" if p == profiles[0] else ""))
                else:
                    con.print(Text(f"{p}: largest {what} that fits {human(budget)}: {best}",
                                   style="bold green" if p == profiles[0] else ""))
            if c.get("searched"):
                con.print(Text("(found by doubling then bisecting, assuming memory grows with the batch)", style="dim"))
        return con.text()

    # ---- compare -----------------------------------------------------------------------------
    def compare(self, doc: dict, opts: RenderOptions) -> str:
        return render_compare(doc, opts)


def render_compare(doc: dict, opts) -> str:
    """`memplan compare` as a table: one column per system."""
    if opts.verbosity <= -1:
        return ""
    if opts.verbosity == 0:
        return _compare_quiet_line(doc)
    exact = opts.verbosity >= 2
    cell = fig if exact else human
    con = _console(opts)
    line = _config_line({**doc, "profile": "all"}).replace(" · profile all", "")
    con.print(Text(line, style="bold"))
    if time_limit_note(doc):
        con.print(Text(f"note: {time_limit_note(doc)}", style="yellow"))
    profiles = doc["profiles"]
    cols = doc["columns"]

    def build(cell, boxed=True):
        table = (Table(header_style="bold") if boxed else
                 Table(header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False,
                       collapse_padding=True))
        table.add_column("category", no_wrap=True)
        for p in profiles:
            table.add_column(p, justify="right", style="bold green" if p == "memplan" else None, no_wrap=True)
        for c in CATEGORIES:
            table.add_row(LABELS[c], *(cell(cols[p]["categories"][c]) if cols[p]["available"] else "n/a"
                                       for p in profiles))
        table.add_section()
        table.add_row(Text("total", style="bold"), *(Text(cell(cols[p]["total"]), style="bold") for p in profiles))
        table.add_row("own lower bound", *(cell(cols[p]["lower_bound"]) if cols[p]["lower_bound"] is not None
                                           else "-" for p in profiles))
        table.add_row("× memplan plan", *(_ratio(cols[p]["ratio_to_memplan"]) for p in profiles))
        table.add_row("× lower bound", *(_ratio(cols[p]["ratio_to_lower_bound"]) for p in profiles))
        return table

    # narrower: exact bytes go (-v), then the boxes, then units shrink to one letter
    variants = ([lambda: build(fig)] if exact else []) + [
        lambda: build(human), lambda: build(human, boxed=False), lambda: build(short_units, boxed=False)]
    table, k = fitted(con, variants)
    con.print(table)
    if exact and k:
        con.print(exact_note(con, variants[0]()))
    if variants[k] is variants[-1] and len(variants) > 1:
        con.print(Text("K, M, G: KiB, MiB, GiB", style="dim"))
    lb = doc["lower_bound"]
    con.print(f"lower bound: {lb:,d} B ({human(lb)}), the peak of live bytes under memplan's lifetimes (no placement "
              "of memplan's buffers goes below it; another schedule or recomputation can); own lower bound: the "
              "same for each system's own pools and lifetimes")
    for p in profiles:
        c = cols[p]
        if not c["available"]:
            con.print(Text(f"{p}: n/a ({c['reason']})", style="yellow"))
    for p in profiles:
        c = cols[p]
        if c["available"] and c.get("checked") and p != "naive":  # how each column was checked
            con.print(Text(f"{p}: {c['checked']}", style="dim"))
    s = (cols.get("singa") or {}).get("figures", {}).get("singa")
    if s:
        con.print(f"singa pool: high-water {human(s['high_water'])}, fragmentation {s['fragmentation']:.4f} "
                  f"(high-water / its lower bound, {human(s['lost_bytes'])} lost to holes)")
    if exact:
        for p in profiles:
            c = cols[p]
            planners = f" [planner {', '.join(c['planners'])}]" if c["planners"] else ""
            con.print(Text(f"{p}: {c['description']}{planners}", style="dim"))
    return con.text()


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} x"


def _compare_quiet_line(doc: dict) -> str:
    parts = []
    for p in doc["profiles"]:
        t = doc["columns"][p]["total"]
        parts.append(f"{p} {t} B" if t is not None else f"{p} n/a")
    return f"{doc['model']['file']}: " + ", ".join(parts) + f", lower bound {doc['lower_bound']} B\n"


def kernels_text(backend: str) -> str:
    """What -v says about the planners' inner loops: `backend` is planners._native.kernels_note()'s
    sentence (the bare names "c" / "python" of older callers are still read)."""
    if backend == "c":
        return "c (compiled at install)"
    if backend == "python":
        return "python (the C kernels did not run: the same plans, more slowly)"
    return backend
