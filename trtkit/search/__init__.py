"""``--precision auto``: the fastest variant that keeps accuracy within the user's budget.

``config`` (SearchConfig and its flags), ``tune`` (the tune split and how a
graph scores on it), ``sensitivity`` (per-layer INT8 sensitivity, cached),
``candidates`` (FP32, FP16, INT8 per calibration method, mixed INT8 with the
most sensitive layers kept in float, found by bisection), ``select`` (the
choice from held-out figures and measured speed) and ``report`` (the
sensitivity table and the accuracy-vs-speed chart).
"""
