"""A run's directory and identity, the run files (variants) and the reference with its claims."""
