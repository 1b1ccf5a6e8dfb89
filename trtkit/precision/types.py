"""The precisions a variant can compute in, each with what every step needs to know of it.

One owner for the vocabulary (``fp32``, ``fp16``, ``int8``, ``mixed``): the
build's option parsing, the verification gate, the precision search and the
TensorRT builder ask ``Precision.parse`` instead of comparing strings of their
own, so a precision added here has its verification threshold everywhere.
"""

import difflib

from trtkit.errors import InputError


class Precision(object):
    """``name``; ``min_agreement``: decision agreement with FP32 below which a variant fails its verification
    gate; ``quantized``: INT8 Q/DQ in the graph; ``requestable``: a plain build can ask for it (``mixed`` comes
    from the precision search only)."""

    def __init__(self, name, min_agreement, quantized=False, requestable=True, advice=""):
        self.name = name
        self.min_agreement = min_agreement
        self.quantized = quantized
        self.requestable = requestable
        self.advice = advice

    def __repr__(self):
        return "Precision({})".format(self.name)

    def advice_for(self, method=None):
        """``advice``, for a quantized variant whose ranges came from ``method`` without suggesting it again."""
        return _int8_advice(method) if self.quantized and method else self.advice

    @staticmethod
    def parse(name):
        """The Precision called ``name`` (a Precision passes through); InputError with the nearest names."""
        if isinstance(name, Precision):
            return name
        found = ALL.get(str(name).strip().lower())
        if found is None:
            close = difflib.get_close_matches(str(name).lower(), sorted(ALL), n=2, cutoff=0.5)
            raise InputError("unknown precision '{}'".format(name), hint="did you mean {}?".format(
                " or ".join(close)) if close else "use a comma list of " + ",".join(REQUESTABLE))
        return found


_SUGGESTED_METHODS = ("percentile", "minmax", "entropy")  # the first two not used are suggested


def _int8_advice(used=None):
    """What to try when an INT8 variant fails its gate: two range methods, not the one it used (a blind test's
    percentile INT8 was told to try percentile); for a fine-tuned one (``used`` 'qat') what moves a fine-tune."""
    if used == "qat":
        return (" - a fine-tuned (QAT) variant: try more or fewer --qat-steps, or post-training INT8 (no "
                "--qat-steps); with labelled held-out images it is judged by accuracy, not by agreement")
    others = ", ".join([m for m in _SUGGESTED_METHODS if m != used][:2])
    said = "{}; this one used {}".format(others, used) if used else others
    return " - try another --calib-method ({}) or more --calib-images".format(said)


_INT8_ADVICE = _int8_advice()
FP32 = Precision("fp32", 0.999)
FP16 = Precision("fp16", 0.99, advice=" - the model may overflow FP16; keep the FP32 variant for it")
INT8 = Precision("int8", 0.98, quantized=True, advice=_INT8_ADVICE)
MIXED = Precision("mixed", 0.98, quantized=True, requestable=False, advice=_INT8_ADVICE)
ALL = dict((p.name, p) for p in (FP32, FP16, INT8, MIXED))
REQUESTABLE = tuple(p.name for p in ALL.values() if p.requestable)
DEFAULT_MIN_AGREEMENT = dict((p.name, p.min_agreement) for p in ALL.values())


def is_quantized(name):
    return Precision.parse(name).quantized
