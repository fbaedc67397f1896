"""Importing this module registers every planner (the module lists are `base.LIGHT` and
`base.SEARCH`: add a new planner module's name there)."""
from memplan_cli.planners.base import LIGHT, SEARCH, load_modules

load_modules(LIGHT + SEARCH)
