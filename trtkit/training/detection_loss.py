"""RetinaNet's training targets and loss, as the focal loss paper (Lin et al., 2017) and torchvision's
``RetinaNet.compute_loss`` define them; trtkit's own code.

- ``box_iou``: IoU of every pair of two sets of x1 y1 x2 y2 boxes;
- ``Matcher``: each anchor takes the ground-truth box it overlaps most; IoU >= ``high`` (0.5) makes it
  foreground for that box, < ``low`` (0.4) background (``BELOW_LOW``), in between it is ignored (``BETWEEN``:
  neither pushed towards an object nor away from it). With ``allow_low_quality_matches`` every box also keeps
  the anchors it overlaps most (ties included), however low the IoU, so a box no anchor fits well (a small or
  oddly shaped object) still has one to be found by. Unlike torchvision, a box that overlaps no anchor at all
  (its best IoU 0) claims none, rather than every anchor at IoU 0;
- ``sigmoid_focal_loss``: binary cross-entropy per (anchor, class) scaled by ``(1 - p_t) ** gamma`` (the easy,
  confident anchors, nearly all background, count little) and weighted ``alpha`` for positives, ``1 - alpha``
  for negatives;
- ``retinanet_loss``: per image, the focal loss over every (anchor, class) of the anchors not ignored, and the L1
  loss of the foreground anchors' regressions against the box coder's ``encode`` of their boxes, both summed and
  divided by the image's foreground anchors (at least 1); then averaged over the images. Why per foreground
  anchor: an image's loss should not grow with its number of anchors, nearly all of them easy background.
- ``ssd_loss``: SSD's (Liu et al., 2016, as torchvision's ``SSD.compute_loss``): an anchor is foreground at IoU >=
  0.5, and every box also takes its best anchor; softmax cross-entropy over the classes (0 the background) on
  the foreground anchors and on the ``NEGATIVES_PER_POSITIVE`` (3) times as many background anchors with the
  highest loss (hard negative mining: the rest, easy, are left out), plus smooth L1 (beta 1) on the foreground
  regressions; both divided by the batch's foreground anchors.
"""

import torch
from torch.nn import functional

BELOW_LOW = -1
BETWEEN = -2
FOCAL_ALPHA = 0.25
FOCAL_GAMMA = 2.0
NEGATIVES_PER_POSITIVE = 3


def box_iou(boxes, others):
    """``[G, A]`` IoU of ``boxes`` ``[G, 4]`` with ``others`` ``[A, 4]`` (x1 y1 x2 y2)."""
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    other_area = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    top_left = torch.max(boxes[:, None, :2], others[None, :, :2])
    bottom_right = torch.min(boxes[:, None, 2:], others[None, :, 2:])
    size = (bottom_right - top_left).clamp(min=0)
    inter = size[..., 0] * size[..., 1]
    return inter / (area[:, None] + other_area[None, :] - inter)


class Matcher(object):
    """``matcher(iou [G, A])`` -> int64 ``[A]``: the matched box's index, ``BELOW_LOW`` or ``BETWEEN``."""

    def __init__(self, high=0.5, low=0.4, allow_low_quality_matches=True):
        if low > high:
            raise ValueError("the background threshold {} is above the foreground one {}".format(low, high))
        self.high = float(high)
        self.low = float(low)
        self.allow_low_quality_matches = bool(allow_low_quality_matches)

    def __call__(self, iou):
        if iou.shape[0] == 0:
            return torch.full((iou.shape[1],), BELOW_LOW, dtype=torch.int64, device=iou.device)
        values, best = iou.max(dim=0)
        matches = best.clone()
        matches[values < self.low] = BELOW_LOW
        matches[(values >= self.low) & (values < self.high)] = BETWEEN
        if self.allow_low_quality_matches:
            highest = iou.max(dim=1).values[:, None]
            kept = ((iou == highest) & (highest > 0)).any(dim=0)
            matches[kept] = best[kept]
        return matches

    def __repr__(self):
        return "Matcher(high={}, low={}, allow_low_quality_matches={})".format(
            self.high, self.low, self.allow_low_quality_matches)


def sigmoid_focal_loss(logits, targets, alpha=FOCAL_ALPHA, gamma=FOCAL_GAMMA):
    """The focal loss of each element (no reduction): ``alpha_t * (1 - p_t) ** gamma * BCE(logits, targets)``;
    ``alpha`` < 0 leaves out the weighting."""
    p = torch.sigmoid(logits)
    cross_entropy = functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = cross_entropy * (1 - p_t) ** gamma
    if alpha >= 0:
        loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss
    return loss


def match_anchors(targets, anchors, matcher):
    """One ``[A]`` match per image of ``targets`` (``(boxes [G, 4], labels [G])`` pairs, input pixels)."""
    matches = []
    for boxes, _ in targets:
        if len(boxes) == 0:
            matches.append(torch.full((anchors.shape[0],), BELOW_LOW, dtype=torch.int64, device=anchors.device))
        else:
            matches.append(matcher(box_iou(boxes.to(anchors.dtype), anchors)))
    return matches


def retinanet_loss(logits, regressions, anchors, targets, box_coder, matcher=None, alpha=FOCAL_ALPHA,
                   gamma=FOCAL_GAMMA):
    """``{"loss", "classification", "box_regression"}`` (scalar tensors) of a batch: ``logits`` ``[N, A, C]``,
    ``regressions`` ``[N, A, 4]`` (``Detector.head_outputs``), ``anchors`` ``[A, 4]``, ``targets`` one
    ``(boxes [G, 4] float, labels [G] int64)`` per image (module doc)."""
    matcher = matcher or Matcher()
    logits, regressions, anchors = logits.float(), regressions.float(), anchors.float()
    classification, regression = [], []
    for index, ((boxes, labels), matches) in enumerate(zip(targets, match_anchors(targets, anchors, matcher))):
        foreground = matches >= 0
        count = max(1, int(foreground.sum()))
        wanted = torch.zeros_like(logits[index])
        matched = matches[foreground]
        wanted[foreground.nonzero().flatten(), labels[matched]] = 1.0
        counted = matches != BETWEEN
        classification.append(sigmoid_focal_loss(logits[index][counted], wanted[counted], alpha, gamma).sum() / count)
        if len(matched):
            codes = box_coder.encode(boxes[matched].to(anchors.dtype), anchors[foreground])
            regression.append(functional.l1_loss(regressions[index][foreground], codes, reduction="sum") / count)
        else:
            regression.append(regressions[index].sum() * 0.0)
    classification = torch.stack(classification).mean()
    regression = torch.stack(regression).mean()
    return {"loss": classification + regression, "classification": classification, "box_regression": regression}


def ssd_matches(boxes, anchors, threshold=0.5):
    """SSD's matching of one image: IoU >= ``threshold`` foreground, the rest background (no band ignored),
    then each box's best anchor forced to that box."""
    if len(boxes) == 0:
        return torch.full((anchors.shape[0],), BELOW_LOW, dtype=torch.int64, device=anchors.device)
    iou = box_iou(boxes.to(anchors.dtype), anchors)
    matches = Matcher(threshold, threshold, allow_low_quality_matches=False)(iou)
    matches[iou.argmax(dim=1)] = torch.arange(len(boxes), device=anchors.device)
    return matches


def ssd_loss(logits, regressions, anchors, targets, box_coder, negatives=NEGATIVES_PER_POSITIVE):
    """``{"loss", "classification", "box_regression"}`` of a softmax detector's batch (module doc); ``targets``'
    labels are the model's class columns (1.., 0 being the background)."""
    logits, regressions, anchors = logits.float(), regressions.float(), anchors.float()
    wanted, box_losses, foreground = [], [], []
    for index, (boxes, labels) in enumerate(targets):
        matches = ssd_matches(boxes, anchors)
        chosen = matches >= 0
        classes = torch.zeros(anchors.shape[0], dtype=torch.int64, device=anchors.device)
        classes[chosen] = labels[matches[chosen]]
        wanted.append(classes)
        foreground.append(chosen)
        if chosen.any():
            codes = box_coder.encode(boxes[matches[chosen]].to(anchors.dtype), anchors[chosen])
            box_losses.append(functional.smooth_l1_loss(regressions[index][chosen], codes, reduction="sum", beta=1.0))
    wanted, foreground = torch.stack(wanted), torch.stack(foreground)
    losses = functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), wanted.reshape(-1),
                                      reduction="none").view(wanted.shape)
    hardest = losses.detach().masked_fill(foreground, -float("inf"))
    rank = hardest.argsort(dim=1, descending=True).argsort(dim=1)  # 0 for the hardest background anchor
    background = rank < negatives * foreground.sum(dim=1, keepdim=True)
    count = max(1, int(foreground.sum()))
    classification = (losses[foreground].sum() + losses[background].sum()) / count
    regression = torch.stack(box_losses).sum() / count if box_losses else regressions.sum() * 0.0
    return {"loss": classification + regression, "classification": classification, "box_regression": regression}
