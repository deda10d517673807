"""The corpus, the cache directories, the teacher and its top-k cache, the corpus vocabulary."""
