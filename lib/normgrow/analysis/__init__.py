"""Statistics and gates, the claims judged, the boundary diagnostics."""
