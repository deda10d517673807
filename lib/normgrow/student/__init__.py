"""The student: the model, its norm placements, growth operators and export."""
