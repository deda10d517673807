"""The corpus, the teacher and its top-k cache, the corpus vocabulary."""
