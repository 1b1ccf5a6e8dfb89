"""Benchmarking: timing loops (``timing``), device records, and reports."""
