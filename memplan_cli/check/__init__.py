"""Independent checks of plans and schedules (they share no code with what they check)."""
