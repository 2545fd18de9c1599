"""privfed's benchmarks and reproductions: the scripts docs/results.md cites, their raw results, its tables.

Run a script as ``python bench/NAME.py`` (or ``python -m bench.NAME``) from the checkout's root; render a table of
docs/results.md from the committed raw results with ``python -m bench.tables NAME``.
"""
