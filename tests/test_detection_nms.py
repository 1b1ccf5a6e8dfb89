"""trtkit's plain-PyTorch NMS decides as torchvision's: against a brute-force loop written from torchvision's CPU
kernel, and against torchvision's own ``batched_nms`` source (both of its strategies).

The brute force works on numpy float32 scalars, one pair at a time, in the kernel's order of operations: the
sort, the suppression of later boxes only, the float IoU compared with the double threshold. It also checks
``torchvision_source.reference_nms``, the NMS torchvision's detection source runs on in these tests.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import torchvision_source  # noqa: E402
from trtkit.models.detection.boxes import clip_boxes  # noqa: E402
from trtkit.models.detection.nms import CPU_COORDINATE_LIMIT, batched_nms, nms  # noqa: E402


def brute_force_nms(boxes, scores, iou_threshold):
    order = scores.sort(0, descending=True)[1].tolist()
    b = boxes.numpy().astype(np.float32)
    area = [np.float32((x2 - x1) * (y2 - y1)) for x1, y1, x2, y2 in b]
    suppressed = [False] * len(b)
    keep = []
    for position, i in enumerate(order):
        if suppressed[i]:
            continue
        keep.append(i)
        for j in order[position + 1:]:
            if suppressed[j]:
                continue
            w = max(np.float32(0), min(b[i][2], b[j][2]) - max(b[i][0], b[j][0]))
            h = max(np.float32(0), min(b[i][3], b[j][3]) - max(b[i][1], b[j][1]))
            inter = np.float32(w * h)
            with np.errstate(invalid="ignore"):  # two empty boxes: 0 / 0, NaN, suppresses nothing
                overlap = inter / np.float32(np.float32(area[i] + area[j]) - inter)
            if float(overlap) > iou_threshold:
                suppressed[j] = True
    return keep


def table_nms(boxes, scores, iou_threshold):
    """NMS from the whole K x K table of overlaps (float IoU above the threshold in double), then one pass in
    score order: the way trtkit's NMS computed it before it went block by block; a reference for large K."""
    order = scores.sort(0, descending=True)[1]
    x1, y1, x2, y2 = boxes[order].unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    width = (torch.min(x2[:, None], x2[None, :]) - torch.max(x1[:, None], x1[None, :])).clamp(min=0)
    height = (torch.min(y2[:, None], y2[None, :]) - torch.max(y1[:, None], y1[None, :])).clamp(min=0)
    inter = width * height
    over = ((inter / (areas[:, None] + areas[None, :] - inter)).double() > iou_threshold).numpy()
    dropped = np.zeros(len(order), dtype=bool)
    kept = []
    for index in range(len(order)):
        if not dropped[index]:
            kept.append(index)
            dropped[index + 1:] |= over[index, index + 1:]
    return order[kept].tolist()


def random_boxes(count, seed, levels=None, span=100.0):
    """``count`` boxes (x1 y1 x2 y2, some empty, some repeated) and scores (``levels`` distinct values: ties)."""
    generator = torch.Generator().manual_seed(seed)
    corner = torch.rand(count, 2, generator=generator) * span
    size = torch.rand(count, 2, generator=generator) * span / 3
    size[::17] = 0  # empty boxes
    boxes = torch.cat([corner, corner + size], dim=1)
    boxes[5::11] = boxes[4::11][:len(boxes[5::11])]  # exact duplicates
    scores = torch.rand(count, generator=generator)
    if levels:
        scores = (scores * levels).floor() / levels
    return boxes, scores


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.3, 0.45, 0.5, 0.55])
def test_nms_is_the_kernels_greedy_rule(seed, threshold):
    boxes, scores = random_boxes(120, seed, levels=8 if seed % 2 else None)
    expected = brute_force_nms(boxes, scores, threshold)
    assert nms(boxes, scores, threshold).tolist() == expected
    assert nms(boxes, scores, threshold, block=7).tolist() == expected  # many blocks: decisions across them
    assert table_nms(boxes, scores, threshold) == expected
    assert torchvision_source.reference_nms(boxes, scores, threshold).tolist() == expected


def test_the_threshold_is_compared_in_double_precision():
    # IoU 55/100 is 0.550000012 in float32: above 0.55 for torchvision's kernel (a float32 comparison says equal)
    boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 5.5]])
    scores = torch.tensor([0.9, 0.8])
    assert nms(boxes, scores, 0.55).tolist() == [0] == brute_force_nms(boxes, scores, 0.55)
    assert nms(boxes, scores, 0.56).tolist() == [0, 1]


@pytest.mark.parametrize("threshold", [0.5, 0.55])
def test_thousands_of_boxes_keep_what_the_full_table_keeps(threshold):
    """5,000 candidates (ties, duplicates, empty boxes), as many blocks: the same keeps, in the same order, as
    the K x K table."""
    boxes, scores = random_boxes(5000, seed=11, levels=50, span=400.0)
    expected = table_nms(boxes, scores, threshold)
    assert 500 < len(expected) < 4500  # both many kept and many dropped
    assert nms(boxes, scores, threshold).tolist() == expected


def test_zero_area_boxes():
    """Empty boxes overlap nothing (0 / area) and each other not at all (0 / 0 is NaN, which drops nothing)."""
    boxes = torch.tensor([[5.0, 5, 5, 5], [5.0, 5, 5, 5], [0.0, 0, 10, 10], [3.0, 3, 3, 9], [0.0, 0, 10, 10]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6, 0.5])
    assert nms(boxes, scores, 0.5).tolist() == [0, 1, 2, 3] == brute_force_nms(boxes, scores, 0.5)
    assert nms(boxes, scores, 0.0).tolist() == [0, 1, 2, 3]


def test_empty_and_single():
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).tolist() == []
    assert batched_nms(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.int64), 0.5).tolist() == []
    assert nms(torch.tensor([[1.0, 1, 2, 2]]), torch.tensor([0.3]), 0.5).tolist() == [0]


@pytest.fixture(scope="module")
def tv_boxes():
    """torchvision's ``ops.boxes`` module from its source (skips, or fails under CI, without the wheel)."""
    wheel = torchvision_source.find_wheel()
    if wheel is None:
        message = "torchvision's wheel is missing (get it with: {})".format(torchvision_source.DOWNLOAD)
        if torchvision_source.required():
            pytest.fail(message)
        pytest.skip(message)
    with torchvision_source.imported(wheel) as package:
        yield package.ops.boxes


@pytest.mark.parametrize("count", [150, 900, 3000])  # 150 and 900 boxes: shifted classes; 3000: one NMS per class
@pytest.mark.parametrize("seed", range(3))
def test_batched_nms_matches_torchvisions(tv_boxes, count, seed):
    boxes, scores = random_boxes(count, seed, levels=16 if seed else None, span=300.0)
    classes = torch.randint(0, 5, (count,), generator=torch.Generator().manual_seed(seed))
    assert (boxes.numel() > CPU_COORDINATE_LIMIT) == (count > 1000)
    for threshold in (0.45, 0.55):
        expected = tv_boxes.batched_nms(boxes, scores, classes, threshold)
        assert batched_nms(boxes, scores, classes, threshold).tolist() == expected.tolist()


def test_clip_boxes_matches_torchvisions(tv_boxes):
    boxes = torch.randn(2, 50, 4, generator=torch.Generator().manual_seed(0)) * 100
    assert torch.equal(clip_boxes(boxes, 60, 80), tv_boxes.clip_boxes_to_image(boxes, (60, 80)))
