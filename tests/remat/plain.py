"""The plain plan a remat problem starts from: memplan's plan without cheap recompute (the remat
problem models the training graph without that pass, passes/cheap_recompute.py), so budget tests take
their budgets relative to it."""
from memplan_cli.analysis import analyze_graph
from memplan_cli.api import config_from_flags
from memplan_cli.loaders import load_model


def plain_without_cheap_recompute(model, batch: int, optimizer: str = "adam", **flags) -> int:
    g = load_model(str(model), batch_size=batch)
    cfg = config_from_flags(g.metadata, batch_size=batch, optimizer=optimizer, **flags)
    return analyze_graph(g, cfg, profile_options={"cheap_recompute": False}).planned_total
