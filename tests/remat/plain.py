"""The plain plan budget tests start from: memplan's own plan without a budget (cheap recompute
included, passes/cheap_recompute.py), what a user sees before asking for one. A budget at or above it
fits without recomputation; below it, remat must recompute."""
from memplan_cli.analysis import analyze_graph
from memplan_cli.api import config_from_flags
from memplan_cli.loaders import load_model


def plain_plan(model, batch: int, optimizer: str = "adam", **flags) -> int:
    g = load_model(str(model), batch_size=batch)
    cfg = config_from_flags(g.metadata, batch_size=batch, optimizer=optimizer, **flags)
    return analyze_graph(g, cfg).planned_total
