"""Which runs make the study, statistics and gates, the claims judged, the boundary diagnostics, numbers in words."""
