"""SearchConfig: the accuracy budget of ``--precision auto`` and how hard to look, validated when made."""

from trtkit.errors import InputError
from trtkit.keywords import Field, Options

DEFAULT_MAX_DROP = 1.0      # top-1 points (accuracy when labelled, agreement otherwise)
DEFAULT_TUNE_IMAGES = 256
DEFAULT_METHODS = ("entropy", "percentile")
MIN_TIMING_SECONDS = 1.0    # every candidate is timed at least this long, whatever --bench-seconds says
TIMING_ROUNDS = 4           # ... in this many interleaved windows (bench.timing.interleaved_throughput)


class SearchConfig(Options):
    """``max_drop``: top-1 points the chosen variant may lose against FP32 (accuracy on labelled held-out
    data, agreement otherwise); ``tune_images``: images of the tune split (the train split, never the
    final held-out one) that rank layers and size the mixed variant; ``methods``: calibration methods
    tried for INT8 (default: the task's own method, ``Task.calibration_method``, then ``DEFAULT_METHODS``:
    ``methods_for``); ``budget_rule``: ``bound`` (a candidate keeps the budget when the upper end of the 95% interval of its
    held-out drop does) or ``estimate`` (its measured drop; the selection says so)."""

    def __init__(self, max_drop=DEFAULT_MAX_DROP, tune_images=DEFAULT_TUNE_IMAGES, methods=None,
                 budget_rule="bound"):
        from trtkit.precision.ranges import check_method
        from trtkit.search.select import BUDGET_RULES
        self.max_drop = float(max_drop)
        self.budget_rule = str(budget_rule)
        if self.budget_rule not in BUDGET_RULES:
            raise InputError("unknown --budget-rule '{}'".format(budget_rule), hint="use " + " or ".join(BUDGET_RULES))
        self.tune_images = int(tune_images)
        self.methods_given = methods is not None
        self.methods = tuple(check_method(m) for m in (DEFAULT_METHODS if methods is None else methods))
        if self.max_drop < 0:
            raise InputError("--max-drop must be 0 or more top-1 points, got {:g}".format(self.max_drop))
        if self.tune_images < 8:
            raise InputError("--tune-images must be at least 8, got {}".format(self.tune_images))
        if not self.methods:
            raise InputError("no calibration method to try")

    def methods_for(self, task):
        """The methods tried for ``task`` (a ``tasks`` Task or its name): as given, else the task's own range
        method first (a detector's minmax: its objects live in the activations' tails, which entropy cuts), then
        the defaults."""
        if self.methods_given:
            return self.methods
        from trtkit import tasks
        own = getattr(tasks.of(task) if not hasattr(task, "name") else task, "calibration_method", None)
        return tuple([own] if own and own not in self.methods else []) + self.methods

    def to_dict(self):
        return {"max_drop": self.max_drop, "tune_images": self.tune_images, "methods": list(self.methods),
                "budget_rule": self.budget_rule}

    GROUP = ("precision search (--precision auto)",)
    FIELDS = (
        Field("max_drop", type=float, metavar="POINTS",
              help="top-1 points the chosen variant may lose against FP32: accuracy on labelled held-out data, else "
                   "agreement (default: {:g})".format(DEFAULT_MAX_DROP)),
        Field("budget_rule", choices=["bound", "estimate"],
              help="what --max-drop is judged on: bound (default): the upper end of the held-out drop's 95%% interval, so a "
                   "candidate is taken only when the images show it within the budget (the log says how many "
                   "images would when they do not); estimate: the measured drop alone (the manifest says so)"),
        Field("tune_images", type=int, metavar="N",
              help="images of the tune split (from the train split, not the held-out one) that rank layer "
                   "sensitivity (default: {})".format(DEFAULT_TUNE_IMAGES)),
    )
