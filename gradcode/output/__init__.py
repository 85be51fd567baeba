"""Output: what a person reads. Results folders become tables, reports and pictures.

:mod:`.numfmt` (numbers with their uncertainty), :mod:`.report` (summary.csv/json and report.md of a comparison),
:mod:`.report_html` (the same as one self-contained HTML page), :mod:`.plots` (the figures, matplotlib imported on
first use), :mod:`.regimes` and :mod:`.regime_plots` (the winner of each cell of a sweep, as a table and a map).
This layer reads records and summaries; it never runs a cluster.
"""
