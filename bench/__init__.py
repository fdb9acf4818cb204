"""Benchmarks that print every figure next to its floor, both measured in the same run.

Run ``python -m bench`` (``--smoke`` for a tiny CI run, ``--only NAME`` for one figure,
``--json PATH`` to choose where the results go). See ``bench.cli`` for the figures and
``bench.floor`` for how the floors are measured. ``bench/transcript_speed.py`` is a separate,
pure-Python benchmark of the output pipeline.
"""
