"""The report's `remat` object: what a budgeted analysis chose and why (plain JSON data).

Claims are fields (`status`, `proof`, `reachable_kind`); the `notes` are sentences written from those
fields here, never matched or edited as text."""
from __future__ import annotations

from memplan_cli.passes.rematerialize import plan_ops

PROOFS = {
    "below_floor": "the budget is below the floor {floor:,d} B (persistent state plus what one step needs "
                   "whatever is recomputed, {floor_step}): no plan fits, proven",
    "no_relaxed_plan": "proven: no plan's live bytes fit the budget (the relaxation of the whole remat space, "
                       "which never counts more than a plan needs, has no solution)",
}


def notes(res) -> list[str]:
    """The sentences a RematResult's structured claims stand for."""
    if res.fits and not res.drop:
        return ["memplan's plan without recomputation fits the budget: nothing to recompute"]
    if res.proof:
        return [PROOFS[res.proof].format(floor=res.floor, floor_step=res.floor_step)]
    if not res.fits:
        return [f"no plan found among those the search scored ({res.evaluations} plans, {res.arenas_planned} "
                f"arenas planned); not proven that none fits (no plan goes below {res.floor:,d} B)"]
    return []


def remat_section(res, problem, tg=None) -> dict:
    """`res`: a solve.RematResult; `tg`: the training graph of the chosen plan (for tensor names)."""
    ops = problem.graph.operations
    out = {
        "budget": int(res.budget),
        "fits": bool(res.fits),
        "status": res.status,
        "step_flops": int(res.step_flops),
        "evaluations": int(res.evaluations),
        "notes": notes(res),
    }
    if res.proof:
        out["proof"] = res.proof
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
            "recomputed_tensors": list(tg.remat.recomputed_tensors if tg and tg.remat else []),
        })
    else:
        out.update({
            "reachable": int(res.reachable),
            "reachable_kind": res.reachable_kind,
            "reachable_ops": [ops[k].label for k in plan_ops(res.reachable_drop)],
            **({"reachable_lower_bound": int(res.reachable_lower_bound)}
               if res.reachable_lower_bound is not None else {}),
            "floor": int(res.floor),
            "floor_step": res.floor_step,
        })
    return out
