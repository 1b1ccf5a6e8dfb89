"""Does a fast path compute what the eager model computes? Max |diff| and top-1 agreement against a tolerance.

Why: a timing of ``torch.compile`` (or any rewritten path) is worth quoting only
if its outputs are the eager model's. ``compare_callables`` runs two callables
(numpy batch in, numpy outputs out) on the same images and ``compare_outputs``
judges the two arrays against the tolerance of the candidate's precision. The
benchmark's agreement pass (``measure``) calls ``compare_outputs`` on the
logits it already has, so no model is run twice for it.

Tolerances (``TOLERANCES``), per precision: the largest |diff| allowed is
``rtol * max|reference|`` (logits have no fixed scale), and the least top-1
agreement. FP32 allows 1e-2 relative: on Ampere and newer GPUs cuDNN convolutions
may run in TF32 (a 10-bit mantissa; ``torch.backends.cudnn.allow_tf32``,
docs.pytorch.org/docs/stable/notes/cuda.html "TensorFloat-32 (TF32) on Ampere
devices"), so two correct FP32 paths can differ by a few 1e-3 relative. The
top-1 floors allow one flip in 64 images for FP32, as near-ties are real.
"""

import numpy as np

TOLERANCES = {"fp32": {"rtol": 1e-2, "min_top1": 0.98},
              "tf32": {"rtol": 1e-2, "min_top1": 0.98},
              "fp16": {"rtol": 5e-2, "min_top1": 0.97},
              "bf16": {"rtol": 1e-1, "min_top1": 0.95}}
DEFAULT_TOLERANCE = TOLERANCES["fp16"]


def tolerance(precision):
    """{"rtol", "min_top1"} for a precision name (an unknown one gets the FP16 tolerance)."""
    return dict(TOLERANCES.get(str(precision or "").lower(), DEFAULT_TOLERANCE))


def decisions(outputs, kind=None):
    """The model's decisions by its output ``kind`` (``trtkit.outputs``; None: logits, or binary-logit for one
    column): per image ([N, C]; a multi-label image is one decision of all its labels) or per pixel ([N, C, H,
    W] -> [N, H, W]). An arg-max of one column would agree whatever the values (measured: ``trtkit bench``
    gave a binary model's FP16 mode 100% top-1 agreement that way)."""
    from trtkit.outputs import BINARY_LOGIT, LOGITS, OutputKind
    outputs = np.asarray(outputs)
    if kind is None:
        kind = BINARY_LOGIT if outputs.ndim > 1 and outputs.shape[1] == 1 else LOGITS
    kind = OutputKind.parse(kind)
    if outputs.ndim == 4:
        return kind.decide_maps(outputs)
    decided = kind.decide(outputs.reshape(len(outputs), -1))
    return decided.reshape(len(decided), -1) if kind.multilabel else decided


def agreement_of(reference, candidate, kind=None):
    """The fraction of decisions (images, or pixels of maps) on which ``candidate`` outputs agree with
    ``reference``'s, by the output ``kind``'s rule."""
    same = decisions(reference, kind) == decisions(candidate, kind)
    if same.ndim == 2:  # multi-label (maps decide to [N, H, W]): an image agrees on all its labels
        same = same.all(axis=1)
    return float(np.mean(same)) if same.size else 1.0


def compare_outputs(reference, candidate, precision, kind=None):
    """{"max_abs_diff", "limit", "top1_agreement", "min_top1", "images", "ok", "why"} of ``candidate`` outputs
    against ``reference`` (same shape), judged by ``precision``'s tolerance; agreement by the output ``kind``'s
    decision rule (``decisions``)."""
    reference = np.asarray(reference, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    if reference.shape != candidate.shape:
        return {"ok": False, "images": int(candidate.shape[0]) if candidate.ndim else 0, "max_abs_diff": None,
                "top1_agreement": None, "precision": precision,
                "why": "output shape {} differs from eager's {}".format(candidate.shape, reference.shape)}
    tol = tolerance(precision)
    finite = bool(np.all(np.isfinite(candidate)))
    diff = float(np.max(np.abs(reference - candidate))) if finite and reference.size else (0.0 if finite else None)
    limit = tol["rtol"] * max(float(np.max(np.abs(reference))) if reference.size else 0.0, 1e-6)
    top1 = agreement_of(reference, candidate, kind) if reference.size else 1.0
    why = []
    if not finite:
        why.append("non-finite outputs")
    elif diff > limit:
        why.append("max |diff| {:.3g} > {:.3g} ({:g} of max |eager|)".format(diff, limit, tol["rtol"]))
    if top1 < tol["min_top1"]:
        why.append("{} {:.2%} < {:.0%}".format("pixel agreement" if reference.ndim == 4 else "top-1 agreement", top1,
                                               tol["min_top1"]))
    return {"ok": not why, "precision": precision, "images": int(reference.shape[0]), "max_abs_diff": diff,
            "limit": limit, "top1_agreement": top1, "min_top1": tol["min_top1"], "why": "; ".join(why) or None}


def compare_callables(reference, candidate, images, precision, batch=32, kind=None):
    """Run ``reference`` and ``candidate`` (each: numpy batch -> numpy outputs) on ``images`` in batches of
    ``batch`` and judge the candidate's outputs (``compare_outputs``)."""
    ref, out = [], []
    for start in range(0, len(images), batch):
        chunk = images[start:start + batch]
        ref.append(np.asarray(reference(chunk)))
        out.append(np.asarray(candidate(chunk)))
    return compare_outputs(np.concatenate(ref), np.concatenate(out), precision, kind)
