"""The report's `remat` object: what a budgeted analysis chose and why (plain JSON data)."""
from __future__ import annotations

from memplan_cli.passes.rematerialize import plan_ops


def remat_section(res, problem, tg=None) -> dict:
    """`res`: a solve.RematResult; `tg`: the training graph of the chosen plan (for tensor names)."""
    ops = problem.graph.operations
    out = {
        "budget": int(res.budget),
        "fits": bool(res.fits),
        "status": res.status,
        "step_flops": int(res.step_flops),
        "evaluations": int(res.evaluations),
        "notes": list(res.notes),
    }
    if res.lower_flops is not None:
        out["added_flops_lower_bound"] = int(res.lower_flops)
        out["flops_ratio_lower_bound"] = round(res.ratio_lower, 6)
    if res.fits:
        out.update({
            "arena": int(res.arena),
            "lower_bound": int(res.bound),
            "added_flops": int(res.added_flops),
            "flops_ratio": round(res.ratio, 6),
            "recomputed_ops": [ops[k].label for k in plan_ops(res.drop)],
            "recomputed_tensors": list((tg.info.get("remat") or {}).get("recomputed_tensors", [])) if tg else [],
        })
    else:
        out.update({
            "reachable": int(res.reachable),
            "reachable_ops": [ops[k].label for k in plan_ops(res.reachable_drop)],
            **({"reachable_lower_bound": int(res.reachable_lower_bound)}
               if res.reachable_lower_bound is not None else {}),
            "floor": int(res.floor),
            "floor_step": res.floor_step,
        })
    return out
