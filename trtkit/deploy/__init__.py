"""Deployment helpers: Triton Inference Server model repositories (``triton.py``).

The docker images live in ``docker/``; this package holds the code that turns
a finished build (its manifest) into something a server loads.
"""
