"""``gpu_check``: one command that runs every GPU path of trtkit on the machine it is given, in a time budget.

* ``plan.py``       the steps, what each needs, the plan (run or skip, and why) and the budget's shares
* ``steps.py``      each step, run in a child process (``python -m trtkit.gpucheck.steps REQUEST``)
* ``run.py``        the parent: plan, children, limits, and the results folder
* ``report.py``     ``gpu_check.md`` from the run's JSON record
* ``cifar_like.py`` CIFAR-shaped training data for a machine with no datasets

``scripts/gpu_check.py`` and ``trtkit gpu-check`` are its command line
(``trtkit.commands.gpu_check``). Only the standard library and numpy are
imported until a step runs.
"""
