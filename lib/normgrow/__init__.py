"""normgrow: normalization placement under curriculum depth growth (see docs/STUDY.md and README.md)."""
__version__ = "0.1.0"
