"""The student: the model, its norm placements and its growth operators."""
