"""The pages and figures: the report, page rendering, number formats, curves, diagnostics figures."""
