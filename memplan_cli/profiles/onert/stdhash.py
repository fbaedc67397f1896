"""Iteration order of onert's unordered_maps keyed by TrainingOperandIndex (placeholder: index order)."""


def unordered_order(ir, candidates):
    return list(reversed(candidates))
