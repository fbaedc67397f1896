"""Profiles: rule sets that turn a forward graph plus a training setup into a BufferList.

A profile is an object with `name` and `build(graph, config) -> BufferList`; each lives in its own
module here and is looked up by name. `memplan` is memplan's own plan; `onert`, `nntrainer`,
`singa` reproduce those systems; `naive` is every tensor its own bytes.
"""
from __future__ import annotations

import importlib

# onert's SIMD packet widths in floats (SSE / NEON, AVX, AVX-512): what --onert-simd-width takes
ONERT_SIMD_WIDTHS = (4, 8, 16)

PROFILE_MODULES = {
    "memplan": "memplan_cli.profiles.memplan",
    "onert": "memplan_cli.profiles.onert",
    "nntrainer": "memplan_cli.profiles.nntrainer",
    "singa": "memplan_cli.profiles.singa",
    "torch": "memplan_cli.profiles.torch",
}


def get_profile(name: str):
    from memplan_cli.errors import ConfigError

    mod_name = PROFILE_MODULES.get(name)
    if mod_name is None:
        raise ConfigError(f"unknown profile {name!r} (choose from {', '.join(PROFILE_MODULES)})")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        if e.name == mod_name:
            raise ConfigError(f"profile {name!r} is not built yet") from None
        raise
    return mod.PROFILE


def shared_training_graphs():
    """A block within which profiles that build the same training step (memplan's and the torch
    profile's, on a file with no dynamo rewrite) build it once (passes.pipeline.shared_builds)."""
    from memplan_cli.passes.pipeline import shared_builds

    return shared_builds()


def available_profiles() -> list[str]:
    out = []
    for name, mod in PROFILE_MODULES.items():
        try:
            importlib.import_module(mod)
            out.append(name)
        except ModuleNotFoundError:
            pass
    return out
