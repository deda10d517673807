"""A run: its validated spec, the training loop, the distillation losses, depth schedules, trackers."""
