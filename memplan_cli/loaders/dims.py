"""Symbolic dimensions other than the batch, bound by name (--dim NAME=N, ONNX Runtime's
free-dimension override): their names, and the one-line refusals when one is left unbound or a
--dim names none of them."""
from __future__ import annotations


class DimsError(Exception):
    """A symbolic dimension left unbound, or a --dim the model cannot take: one line, exit 2."""


def symbolic_dim_name(input_name: str, position: int) -> str:
    """The name memplan gives a dynamic dimension the file leaves unnamed (an ONNX dim without a
    dim_param, a TF Lite shape_signature -1): `<input>_dim<position>`, stable from run to run."""
    return f"{input_name}_dim{position}"


def check_dims(dims: dict, found) -> None:
    """Refuse a --dim naming no symbolic dimension of the model (a typo would otherwise bind nothing)
    or naming the batch (that is -b's). `found`: (name, input, position, is_batch) per dynamic dim."""
    batch = {name: (inp, k) for name, inp, k, is_batch in found if is_batch}
    others = sorted({name for name, _, _, is_batch in found if not is_batch and name not in batch})
    for name, value in sorted(dims.items()):
        if name in batch:
            inp, k = batch[name]
            raise DimsError(f"--dim {name}={value}: '{name}' is the batch dimension (dim {k} of graph input "
                            f"'{inp}'); set it with -b {value}")
        if name not in others:
            has = (f"its symbolic dimensions besides the batch: {', '.join(others)}" if others else
                   "it has none besides the batch" if batch else "it has none")
            raise DimsError(f"--dim {name}={value}: the model has no symbolic dimension '{name}' ({has})")


def unbound_dims(unbound) -> str:
    """The refusal for symbolic dimensions no --dim binds: each named, with the flag that binds it."""
    names = list(dict.fromkeys(name for name, _, _, _ in unbound))
    where = {}
    for name, inp, k, _ in unbound:
        where.setdefault(name, f"graph input '{inp}', position {k}")
    shown = "; ".join(f"'{n}' ({where[n]})" for n in names)
    flags = " ".join(f"--dim {n}=N" for n in names)
    return (f"symbolic dimension{'s' if len(names) > 1 else ''} {shown} not bound: memplan needs static "
            f"shapes; pass {flags}")
