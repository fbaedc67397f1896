"""Per-op backward rules, one module per op family. Each module exposes `RULES = {op type: rule}`."""
