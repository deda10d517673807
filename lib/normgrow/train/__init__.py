"""A run: its spec and training loop, the distillation losses, schedules, data-parallel ranks, trackers."""
