"""The pages and figures: the study report, page rendering, curves, the forest plot, diagnostics figures."""
