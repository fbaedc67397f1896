"""Which model outputs carry a loss in a training step, and their names as a user reads them.

Used by the loss-insertion pass (passes/loss_insertion.py), the analysis and the reports.
"""
from __future__ import annotations

from fnmatch import fnmatchcase

from memplan_cli import ops
from memplan_cli.errors import ConfigError, MemplanError


def _is_float(o) -> bool:
    return o.dtype.startswith(("float", "bfloat"))


def output_label(graph, o: int) -> str:
    """An output's name as a user reads it: its signature name when the file has one (a TF Lite
    signature runner's output name), else its tensor name."""
    return ((getattr(graph, "metadata", None) or {}).get("output_names") or {}).get(o) or graph.operands[o].name


def carries_gradient(graph, o: int) -> bool:
    """Whether a gradient can flow back from output o: not one of a `no_grad` op's outputs, nor at a
    position its op declares non-differentiable (BatchNormalization's running statistics)."""
    for op in graph.operations:
        if o in op.outputs:
            d = ops.get(op.type)
            return d is None or not (d.no_grad or op.outputs.index(o) in d.nondiff_outputs)
    return True


def loss_outputs(graph, patterns=()) -> list[int]:
    """Operand indices of the model outputs that carry a loss, in the file's output order.

    Default: every float, non-constant output a gradient can flow back from (not an integer output
    such as an argmax index, nor BatchNormalization's running statistics); when none can, the first
    output, as memplan did before (nothing then trains: the report says so). `patterns`
    (`--loss-outputs`): output names or globs (matched against the tensor name and the signature
    name, `output_label`); each must match an output and every output it names must be a float,
    non-constant one a gradient flows back from (ConfigError otherwise)."""
    outs = list(dict.fromkeys(graph.outputs))
    ops = graph.operands
    if not outs:
        raise ConfigError("the model has no output to attach a loss to")
    listing = ", ".join(output_label(graph, o) for o in outs)
    if patterns:
        chosen: set[int] = set()
        for p in patterns:
            hit = {o for o in outs if fnmatchcase(ops[o].name, p) or fnmatchcase(output_label(graph, o), p)}
            if not hit:
                raise ConfigError(f"--loss-outputs {p} matches no model output (the outputs: {listing})")
            chosen |= hit
        for o in sorted(chosen):
            if ops[o].is_const:
                raise ConfigError(f"--loss-outputs: output {output_label(graph, o)} is a constant; there is nothing to train")
            if not _is_float(ops[o]):
                raise ConfigError(f"--loss-outputs: output {output_label(graph, o)} is {ops[o].dtype}; a loss needs "
                                  "a float output")
            if not carries_gradient(graph, o):
                raise ConfigError(f"--loss-outputs: no gradient flows back from output {output_label(graph, o)} "
                                  "(its op's output there is not differentiable, e.g. running statistics)")
        return [o for o in outs if o in chosen]
    chosen_list = [o for o in outs if not ops[o].is_const and _is_float(ops[o]) and carries_gradient(graph, o)]
    if not chosen_list:
        if ops[outs[0]].is_const:
            raise ConfigError(f"the model output {ops[outs[0]].name} is a constant; there is nothing to train")
        return outs[:1]
    return chosen_list


def loss_output_names(graph, config) -> list[str]:
    """The names (`output_label`) of the outputs that carry a loss under `config`; [] when the
    graph has no outputs or `--loss-outputs` does not resolve (the analysis reports that error)."""
    if graph is None or not getattr(graph, "outputs", None):
        return []
    try:
        return [output_label(graph, o) for o in loss_outputs(graph, getattr(config, "loss_outputs", ()))]
    except MemplanError:
        return []
