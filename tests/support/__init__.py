"""Shared test support: what several test folders need, written once.

``runs`` runs ``ddsup start`` as a real subprocess (to its end, or in the background) and
reads what the run leaves behind; ``polls`` is the one bounded poll for conditions that
have no event to await; ``procs`` reads ``/proc``; ``units`` builds validated units and
plans in memory for the pure tests. ``tests`` is on ``sys.path`` (pyproject's pytest
``pythonpath``), so test modules ``import support``.
"""
