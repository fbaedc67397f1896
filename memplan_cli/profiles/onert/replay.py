"""onert's three planners over (sizes, firsts, lasts) with distinct claim/release events.

Temporary home until `memplan_cli/planners/` carries bump / firstfit / wic with onert's
semantics; `build()` names the registry planners, these are used when they are missing and by
the tests as a cross-check. Each takes events in the order onert issues them: a claim at `first`,
a release at `last` (all distinct numbers within one pool).
"""
from __future__ import annotations


def bump(sizes, firsts, lasts):
    offsets, top = [0] * len(sizes), 0
    for k in sorted(range(len(sizes)), key=lambda k: firsts[k]):
        offsets[k] = top
        top += sizes[k]
    return offsets, top


def firstfit(sizes, firsts, lasts):
    """FirstFit online: claims take the first gap between live blocks (by offset) that fits."""
    ev = sorted([(f, 1, k) for k, f in enumerate(firsts)] + [(l, 0, k) for k, l in enumerate(lasts)])
    live: dict[int, int] = {}  # offset-sorted on demand: offset -> buffer
    offsets, cap = [0] * len(sizes), 0
    for _, is_claim, k in ev:
        if not is_claim:
            live = {o: b for o, b in live.items() if b != k}
            continue
        nxt = 0
        for off in sorted(live):
            b = live[off]
            if nxt + sizes[k] <= off:
                break
            nxt = max(nxt, off + sizes[b])
        offsets[k] = nxt
        live[nxt] = k
        cap = max(cap, nxt + sizes[k])
    return offsets, cap


def wic(sizes, firsts, lasts):
    """Weighted interval colouring: size-descending (ties: claim order), first fit among interferers."""
    n = len(sizes)
    order = sorted(range(n), key=lambda k: (-sizes[k], firsts[k]))
    offsets, placed, cap = [0] * n, [], 0
    for k in order:
        inter = sorted((offsets[j], sizes[j]) for j in placed
                       if not (lasts[j] < firsts[k] or lasts[k] < firsts[j]))
        nxt = 0
        for off, sz in inter:
            if nxt + sizes[k] <= off:
                break
            if nxt < off + sz:
                nxt = off + sz
        offsets[k] = nxt
        placed.append(k)
        cap = max(cap, nxt + sizes[k])
    return offsets, cap


PLANNERS = {"bump": bump, "firstfit": firstfit, "wic": wic}


def _register():
    from memplan_cli.planners.base import Plan, register

    def wrap(name, fn):
        @register("onert-" + name)
        def plan(sizes, firsts, lasts, *, time_limit=None):
            offsets, cap = fn(list(sizes), list(firsts), list(lasts))
            return Plan(tuple(offsets), cap, "onert-" + name)
        return plan

    for name, fn in PLANNERS.items():
        wrap(name, fn)


_register()
