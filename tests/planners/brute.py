"""Test-only O(n^2) plan checker, written separately from memplan_cli.check to cross-check it."""


def brute_force_errors(sizes, firsts, lasts, offsets, arena):
    """Every broken rule as a list of strings (empty when the plan is valid)."""
    errs = []
    n = len(sizes)
    for i in range(n):
        if offsets[i] < 0:
            errs.append(f"negative offset {i}")
        if offsets[i] + sizes[i] > arena:
            errs.append(f"past arena {i}")
    for i in range(n):
        for j in range(i + 1, n):
            if sizes[i] == 0 or sizes[j] == 0:
                continue
            live_together = firsts[i] <= lasts[j] and firsts[j] <= lasts[i]
            bytes_meet = offsets[i] < offsets[j] + sizes[j] and offsets[j] < offsets[i] + sizes[i]
            if live_together and bytes_meet:
                errs.append(f"overlap {i} {j}")
    return errs
