"""What `figures` reports beside the peak: the split at the peak in MemTracker's terms, and how
sure the figure is (the ops the general rule estimated)."""
from __future__ import annotations

from memplan_cli.ops.conv import CPU_NAME


# a profile whose estimated ops hold more than this share of the peak says so in the table's header
ESTIMATED_SHARE = 0.02


def _a_share(n: int, peak: int) -> bool:
    """Whether `n` bytes (estimated, left out, or a figure beside's difference) are a large enough share
    of the peak for the header to say so (`says_so`)."""
    return bool(peak) and n > ESTIMATED_SHARE * peak


def coverage(bl, at: int, peak: int) -> dict:
    """How sure the figure is: of the eager ops replayed, how many a measured rule covers, and the ops
    the general rule estimated (`GENERAL`), each with the bytes it made (outputs, saved tensors,
    temporaries, gradients from its backward) that are live at the peak."""
    cov = bl.profile_data.get("coverage") or {"ops": 0, "estimated": {}}
    est = cov["estimated"]
    why = cov.get("why") or {}  # a family's reason, where its facts say why they are approximate
    at_peak = dict.fromkeys(est, 0)
    for b in bl.buffers:
        if b.owner in at_peak and b.first <= at <= b.last:
            at_peak[b.owner] += b.size
    total = sum(at_peak.values())
    out = {"ops": cov["ops"], "measured": cov["ops"] - len(est),
           "estimated": [{"op": label, "type": est[label], "bytes_at_peak": at_peak[label],
                          **({"why": why[label]} if label in why else {})} for label in est],
           "estimated_bytes_at_peak": total,
           "estimated_share": round(total / peak, 4) if peak else 0.0,
           "says_so": _a_share(total, peak)}
    if any(e.get("why") for e in out["estimated"]):
        # the families' reasons, each with its ops' count and bytes at the peak: the clauses the table's
        # estimated line and compare's line print
        out["reasons"] = reasons(out)
    cached = cov.get("cache_sized") or {}
    if cached:
        # convolutions whose scratch oneDNN's cache model sizes from the CPU's L2: of each op's scratch live
        # at the peak, at most the part the cache model sized
        parts = bl.profile_data.get("parts") or [""] * len(bl.buffers)
        live = dict.fromkeys(cached, 0)
        for b, part in zip(bl.buffers, parts):
            if b.owner in live and part == "scratch" and b.first <= at <= b.last:
                live[b.owner] += b.size
        n = sum(min(live[label], nb) for label, (_, nb) in cached.items())
        out["cache_sized"] = {"ops": [{"op": label, "type": t, "bytes": nb} for label, (t, nb) in cached.items()],
                              "bytes": n, "says_so": _a_share(n, peak), "note": cache_note(len(cached), n)}
    folded = cov.get("not_counted") or []
    if folded:
        # eager ops on constants the loader folded: their tensors are no part of the figure
        n = sum(c["bytes"] for c in folded)
        ops = [{"op": c["op"], "type": c["type"], "bytes": c["bytes"]} for c in folded]
        out["not_counted"] = {"ops": ops, "bytes": n, "says_so": _a_share(n, peak),
                              "note": folded_note(ops, n)}
    if cov.get("unread_parameters") or cov.get("tied_parameters"):
        # listed by the dynamo graph signature, read by no op of the file: eager holds them, the figure
        # does not (their sizes are not in the file); the sentence the reports print, written once here;
        # tied_parameters: unread ones the file shows may be a tied parameter it reads under another name
        if cov.get("unread_parameters"):
            out["unread_parameters"] = list(cov["unread_parameters"])
        if cov.get("unread_modules"):
            out["unread_modules"] = list(cov["unread_modules"])
        if cov.get("tied_parameters"):
            out["tied_parameters"] = dict(cov["tied_parameters"])
        out["unread_note"] = "; ".join(n for n in (
            unread_note(cov["unread_parameters"], cov.get("composite"), cov.get("unread_modules"))
            if cov.get("unread_parameters") else "", tied_note(cov.get("tied_parameters") or {})) if n)
    if cov.get("composite"):
        # the file is the language part of a composite model: eager also holds the other parts' parameters
        # (a dynamo file's signature names them: the unread line says which; a TorchScript file cannot)
        comp = dict(cov["composite"])
        if not comp.get("other_parts"):
            comp["note"] = composite_note(comp["language_part"])
        out["composite"] = comp
    if cov.get("estimated_parameters"):
        # parameters the exporter folded into a constant of the part it reads (a position table's rows):
        # eager holds the whole parameter (and, trained, its gradient and optimizer state); the file
        # records no size, so the figure counts the part the constant keeps
        out["estimated_parameters"] = list(cov["estimated_parameters"])
        out["estimated_parameters_note"] = estimated_parameters_note(cov["estimated_parameters"])
    if cov.get("constant_layers"):
        # trained layers whose data input is a batch-shaped constant (constant_layers.py): if the module
        # made it requiring grad, eager also holds it and its gradient through the step
        made = cov["constant_layers"]
        n = sum(c["bytes"] for c in made)
        out["constant_layers"] = {"constants": [dict(c) for c in made], "bytes": n,
                                  "says_so": _a_share(2 * n, peak),
                                  "note": constant_layers_note(len(made), n)}
    if cov.get("contiguous_sites"):
        # transposed tensors a reshape reads as views, where a `.contiguous()` a TorchScript file does
        # not record would have copied (replay.dropped_contiguous): the peak with each copied, beside
        out["contiguous"] = _copied(cov["contiguous_sites"], ("op", "bytes"), cov["as_contiguous_peak"], peak)
        out["contiguous"]["note"] = contiguous_note(out["contiguous"])
    if cov.get("view_sites"):
        # the model's output viewing a larger tensor and broadcast views handed to several submodules
        # (replay.dropped_contiguous, handed_down): the peak with each copied, beside
        out["copied_views"] = _copied(cov["view_sites"], ("op", "bytes", "kind"), cov["as_copied_peak"], peak)
        out["copied_views"]["note"] = copied_views_note(out["copied_views"])
    if cov.get("causal_tables"):
        # constants of a (T, T) slice a TorchScript file may have folded from a module's causal table
        # (attention.folded_causal_tables): the peak had eager held each table all step, beside
        tab = dict(cov["causal_tables"])
        out["causal_tables"] = {**tab, "peak": peak + tab["bytes"], "says_so": _a_share(tab["bytes"], peak)}
        out["causal_tables"]["note"] = causal_tables_note(out["causal_tables"])
    if cov.get("fixed_tables"):
        # position tables read at fixed rows, trained by assumption (the file does not say whether eager
        # keeps them frozen, as a sinusoidal one): the peak with them frozen, beside
        ft = cov["fixed_tables"]
        out["fixed_tables"] = _beside(ft["peak"], peak, tables=list(ft["tables"]))
        if peak:
            out["fixed_tables"]["note"] = fixed_tables_note(out["fixed_tables"], peak)
    if cov.get("possible_functions"):
        # written-out formulas a custom autograd Function may have run (functions.py): the peak with each
        # read as a Function saving only its input; said in the header when it differs by the same share
        alt = cov["as_functions_peak"]
        out["as_functions"] = _beside(alt, peak, modules=cov["possible_functions"])
        if peak:
            out["as_functions"]["note"] = functions_note(cov["possible_functions"], alt, peak)
    if cov.get("recorded_functions"):
        # custom autograd Functions a dynamo file records (functions.py): counted as saving only their
        # inputs; the peak had they saved what their ops' own backwards save (their intermediates), the
        # other end of what the file allows; said in the header when it differs by the same share
        alt = cov["as_ops_peak"]
        out["functions_as_ops"] = _beside(alt, peak, functions=cov["recorded_functions"])
        if peak:
            out["functions_as_ops"]["note"] = functions_as_ops_note(cov["recorded_functions"], alt, peak)
    if cov.get("solves"):
        # forward-substitution loops a dynamo file writes, counted as eager's solve_triangular: the peak
        # with the loops run as written instead (each row's copies saved)
        alt = cov["as_loop_peak"]
        out["as_loop"] = _beside(alt, peak, loops=cov["solves"])
        out["as_loop"]["note"] = (f"with the {cov['solves']} forward-substitution loop(s) run as written "
                                  f"instead of solve_triangular, the peak is {alt:,d} B")
    if cov.get("held_lines"):
        # ops a dynamo file records under one source line (a called function's own lines unrecorded):
        # its Python locals are not counted; the peak with every tensor they make held to the line's end
        alt = cov["as_held_peak"]
        out["as_held"] = _beside(alt, peak, **cov["held_lines"])
        out["as_held"]["note"] = held_note(out["as_held"])
    if cov.get("regions"):
        # ops a dynamo export inlined from the body of a no_grad / enable_grad / autocast block (the file
        # does not say which): the peak with the blocks run under no_grad
        alt = cov["as_no_grad_peak"]
        out["as_no_grad"] = _beside(alt, peak, **cov["regions"])
        if peak:
            ng = out["as_no_grad"]
            ng["note"] = (f"estimated: {ng['ops']} op(s) of {ng['blocks']} `with` block(s) the exporter inlined "
                          f"ran as recorded; if under torch.no_grad() (the file cannot tell it from autocast), "
                          f"the peak is {alt:,d} B ({100 * (alt / peak - 1):+.1f} %)")
    return out


def _copied(sites: list, fields: tuple, alt: int, peak: int) -> dict:
    """Views a `.contiguous()` the file does not record may have copied (the replay's sites, each with
    `fields`), their bytes and the peak `alt` with each copied, beside the figure `peak`."""
    return _beside(alt, peak, views=[{k: c[k] for k in fields} for c in sites],
                   bytes=sum(c["bytes"] for c in sites))


def _beside(alt: int, peak: int, **fields) -> dict:
    """A figure beside the peak: what it is about (`fields`), the peak `alt` had it happened, and
    whether the two differ by a large enough share for the header to say so."""
    return {**fields, "peak": alt, "says_so": _a_share(abs(alt - peak), peak)}


def _shown(names: list, k: int) -> str:
    """The first `k` of `names`, then how many more: what a note shows of a list."""
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def cache_note(k: int, n: int) -> str:
    """The sentence the reports print where convolutions' scratch comes from oneDNN's cache model
    (`figures.torch.coverage.cache_sized.note`: the table's header when `says_so`, compare's line)."""
    return (f"{k} convolution(s) on oneDNN's gemm kernel hold {n:,d} B of im2col scratch at the peak, blocked "
            f"by its cache model for the CPU this profile assumes ({CPU_NAME}); another L2 size gives other "
            f"blocks")


def coverage_line(cov: dict) -> str:
    """`memplan compare`'s line for this model: how many of its ops measured rules cover."""
    line = f"measured rules cover {cov['measured']} of {cov['ops']} eager ops of this model"
    if cov["estimated"]:
        types = sorted({e["type"] for e in cov["estimated"]})
        line += (f"; {len(cov['estimated'])} estimated, no measured rule covering them ({', '.join(types)}), "
                 f"{cov['estimated_bytes_at_peak']:,d} B of the peak")
        for why in cov.get("reasons") or ():
            line += "; " + why
        if cov.get("as_loop"):
            line += "; " + cov["as_loop"]["note"]
    nc = cov.get("not_counted") or {}
    if nc:
        line += "; " + nc["note"]
    if cov.get("unread_note"):
        line += "; " + cov["unread_note"]
    if (cov.get("composite") or {}).get("note"):
        line += "; " + cov["composite"]["note"]
    if cov.get("estimated_parameters_note"):
        line += "; " + cov["estimated_parameters_note"]
    cl = cov.get("constant_layers") or {}
    if cl:
        line += "; " + cl["note"]
    if (cov.get("cache_sized") or {}).get("says_so"):
        line += "; " + cov["cache_sized"]["note"]
    for key in ("contiguous", "copied_views", "causal_tables", "fixed_tables", "as_functions", "functions_as_ops",
                "as_held", "as_no_grad"):  # the figures beside the peak, each when it differs by a share of it
        if (cov.get(key) or {}).get("says_so"):
            line += "; " + cov[key]["note"]
    return line + " (devtools/torch_oracle.py; docs/torchprof.md)"


def reasons(cov: dict) -> list[str]:
    """The distinct reasons a family's facts gave for ops named as estimated, each with its ops' count
    and bytes at the peak (`figures.torch.coverage.reasons`, which the table's estimated line and
    `compare` print)."""
    out: dict[str, list[int]] = {}
    for e in cov.get("estimated") or ():
        if e.get("why"):
            n = out.setdefault(e["why"], [0, 0])
            n[0] += 1
            n[1] += e["bytes_at_peak"]
    return [f"{n} of them ({b:,d} B) as {why}" for why, (n, b) in out.items()]


def fixed_tables_note(ft: dict, peak: int) -> str:
    """What the figure assumes of the tables read at fixed rows (`figures.torch.coverage.fixed_tables
    .note`, which the table's header and `compare` print): counted as trained, and the peak with them
    frozen (a sinusoidal table, a Parameter eager keeps with requires_grad=False)."""
    return (f"estimated: {len(ft['tables'])} table(s) read at fixed rows ({_shown(ft['tables'], 1)}) counted as "
            f"trained (the file does not say); frozen, as a sinusoidal table is in eager, the peak is "
            f"{ft['peak']:,d} B ({100 * (ft['peak'] / peak - 1):+.1f} %)")


def functions_note(modules: list, alt: int, peak: int) -> str:
    """What the figure estimates where written-out formulas may have run as custom autograd Functions
    (`figures.torch.coverage.as_functions.note`, which the table's header and `compare` print): the
    modules' last names, counted (`gelu_impl x 2`), and the peak so run."""
    names: dict[str, int] = {}
    for m in modules:
        name = m["module"].rsplit("/", 1)[-1] or "the root module"
        names[name] = names.get(name, 0) + 1
    shown = ", ".join(f"{k} x {n}" if n > 1 else k for k, n in names.items())
    return (f"estimated: {shown} may have run as custom autograd Functions saving only their inputs (the file "
            f"cannot tell); so run, the peak is {alt:,d} B ({100 * (alt / peak - 1):+.1f} %)")


def functions_as_ops_note(functions: int, alt: int, peak: int) -> str:
    """What the figure estimates where a dynamo file records custom autograd Functions, counted as
    saving only their inputs (`figures.torch.coverage.functions_as_ops.note`, which the table's header
    and `compare` print): the peak had they saved what their ops save run one by one."""
    return (f"estimated: {functions} custom autograd Function call(s) counted as saving only their inputs (their "
            f"backward is Python code the file lacks); had they saved what their ops save run one by one, the "
            f"peak is {alt:,d} B ({100 * (alt / peak - 1):+.1f} %)")


def held_note(held: dict) -> str:
    """What the figure leaves out where ops are recorded under one source line: a called function's
    Python locals (`figures.torch.coverage.as_held.note`, which the table's header and `compare`
    print)."""
    calls = [t for t in held["lines"] if t.endswith("(")] or held["lines"]
    shown = "; ".join(f"`{t}`" for t in calls[:1]) + (" and more" if len(held["lines"]) > 1 else "")
    return (f"not counted: the Python locals of {held['calls']} call(s) the file records under one source line "
            f"each ({held['ops']} ops; {shown}): with every tensor they make held until they return, the "
            f"peak is {held['peak']:,d} B")


def contiguous_note(cont: dict) -> str:
    """What the figure leaves out where a TorchScript file may have dropped `.contiguous()` calls: the
    sentence the reports print, written once here."""
    ops = [c["op"] for c in cont["views"]]
    shown = _shown(ops, 1)
    return (f"estimated: {len(ops)} transposed tensor(s) a reshape reads as a view ({shown}; "
            f"{cont['bytes']:,d} B) {_IF_COPIED.format(cont['peak'])}")


# the end of the sentences on views a `.contiguous()` the file does not record may have copied
_IF_COPIED = ("were copies if the code called `.contiguous()` on them, which a TorchScript file does not "
              "record: with each copied, the peak is {:,d} B")


def copied_views_note(cv: dict) -> str:
    """What the figure may miscount where a TorchScript file's view would have been copied by a
    `.contiguous()` it does not record: the model's output viewing a larger tensor (copied, the base
    is freed when the forward returns) and a broadcast view a module hands to several submodules
    (copied, held until it returns). `figures.torch.coverage.copied_views.note`, which the table's
    header and `compare` print."""
    parts = []
    for kind, what in (("output", "output(s) viewing a larger tensor"),
                       ("handed", "broadcast view(s) handed to several submodules")):
        views = [c for c in cv["views"] if c["kind"] == kind]
        if views:
            parts.append(f"{len(views)} {what} ({_shown([c['op'] for c in views], 1)}; "
                         f"{sum(c['bytes'] for c in views):,d} B)")
    return f"estimated: {' and '.join(parts)} {_IF_COPIED.format(cv['peak'])}"


def causal_tables_note(tab: dict) -> str:
    """What the figure may leave out where a TorchScript file holds (T, T) constants under module scopes
    beside a learned position table of P rows: each a slice of its module's (P, P) causal table, which
    the exporter folds and eager holds (`figures.torch.coverage.causal_tables.note`, which the table's
    header and `compare` print)."""
    mods = tab["modules"]
    shown = _shown(mods, 1)
    p, t = tab["rows"], tab["slice"]
    return (f"estimated: {len(mods)} module(s) read a folded {t} x {t} mask ({shown}); if each is a slice of "
            f"its module's {p} x {p} causal table (a buffer the TorchScript file does not keep), eager "
            f"holds {tab['bytes']:,d} B more: the peak is {tab['peak']:,d} B")


def estimated_parameters_note(targets: list) -> str:
    """What the figure estimates: parameters a folded constant kept only a part of
    (`figures.torch.coverage.estimated_parameters_note`, which the table's header and `compare` print)."""
    shown = _shown(targets, 2)
    return (f"estimated: {len(targets)} parameter(s) the exporter folded into a constant of the part its ops "
            f"read ({shown}), counted at that size; eager holds the whole parameter and, trained, its gradient "
            f"and optimizer state; the file gives no size")


def folded_note(ops: list, n: int) -> str:
    """What the figure leaves out: eager ops on constants memplan folded at load
    (`figures.torch.coverage.not_counted.note`, which the table's header and `compare` print)."""
    types = sorted({c["type"] for c in ops})
    return (f"not counted: {len(ops)} op(s) PyTorch runs on constants each step ({', '.join(types)}) were "
            f"folded into constants here; their {n:,d} B of outputs are not in the figure")


def constant_layers_note(layers: int, n: int) -> str:
    """What the figure leaves out: trained layers reading a batch-shaped constant the module may have
    made requiring grad (`figures.torch.coverage.constant_layers.note`, which the table's header and
    `compare` print)."""
    return (f"not counted: {layers} trained layer(s) read a batch-shaped constant ({n:,d} B), not the "
            f"model's input; if the module made it requiring grad, eager also holds it and its gradient "
            f"through the step")


def composite_note(part: str) -> str:
    """What the figure leaves out of a file that is the language part of a composite model (a text-only
    TorchScript export of a multimodal transformers model): the composite's other parts, which eager
    holds and the file does not. One line of at most 80 columns where the part's path allows."""
    for line in (f"not counted: the composite model's parts beside {part}; no size",
                 f"not counted: the composite model's parts beside {part}"):
        if len(line) <= 80:
            return line
    return line


def unread_note(targets: list, composite: dict | None = None, outermost: list | None = None) -> str:
    """What the figure leaves out: the parameters of modules the traced forward never entered, or entered
    for a result no output reads (both exporters drop such a branch, and eager's forward still runs it:
    its activations are left out too), named by the outermost modules none of whose parameters is read
    (`outermost`; else by their own modules; in the language part of a composite model: the
    composite's other parts, which a text-only step never runs). `figures.torch.coverage.unread_note`,
    which the table's header and `compare` print."""
    modules = sorted(outermost) if outermost else sorted({t.rpartition(".")[0] or t for t in targets})
    shown = _shown(modules, 2)
    caveat = ("; eager holds them unless they are read under other names (a shared module) or by an op the "
              "exporter merged with an equal one; one the forward runs for a result no output reads also "
              "made activations the file drops, which can raise the forward's peak")
    if (composite or {}).get("other_parts"):
        # a composite's towers: named as parts, not their first modules; no op reads a tower's parameters
        # under another name, so the caveat is for the other modules only
        parts = composite["other_parts"]
        rest = [m for m in modules if not any(m == p or m.startswith(p + ".") for p in parts)]
        shown = (f"{', '.join(parts)}: the composite model's parts beside {composite['language_part']}"
                 + (f"; and {len(rest)} more module(s)" if rest else ""))
        caveat = caveat if rest else ""
    return f"not counted: {len(targets)} parameter(s) no op of the file reads ({shown}){caveat}; the file gives no size"


def tied_note(tied: dict) -> str:
    """The unread parameters the file shows may be a tied one it reads under another name (BART's
    `model.shared`, one table with `lm_head.weight`): named apart from the unread ones, as counted."""
    if not tied:
        return ""
    names = sorted(tied)
    shown = _shown([f"{t} as {tied[t]}" for t in names], 2)
    return (f"{len(names)} parameter(s) no op reads under its own name may be a tied one the file reads under "
            f"another ({shown}): if so the figure counts it (eager holds one tensor), if not eager also holds it; the "
            f"file cannot tell and gives no size")


# the split `figures` reports at the peak, in MemTracker's terms (PARAM + BUFFER, OPT, GRAD, ACT,
# TEMP, and OTH for the batch): optimizer temporaries count with its state, as MemTracker counts them;
# `scratch` is what kernels allocate through the allocator that is no tensor (MemTracker misses it)
PARTS = ("parameters", "optimizer", "gradients", "activations", "temporaries", "batch", "scratch")


def split_at(bufs, parts, at: int) -> dict:
    """Bytes live at step `at` by part; a weight's gradient is a temporary in the backward step that
    makes it (it becomes `.grad` when that step returns: MemTracker's view)."""
    split = dict.fromkeys(PARTS, 0)
    for b, part in zip(bufs, parts):
        if b.first <= at <= b.last:
            split["temporaries" if part == "gradients" and b.first == at else part] += b.size
    return split


def part_of(s: dict, steps) -> str:
    cat = s["category"]
    if cat == "trainable":
        return "parameters"
    if cat == "opt-variable" or steps[s["first"]].kind == "applyGradient":
        return "optimizer"
    if cat == "gradient":
        return "gradients"
    if s["kind"] == "held":
        return "batch"
    if s["kind"] == "scratch":
        return "scratch"
    if steps[s["first"]].kind == "forward":
        return "activations"
    return "temporaries"
