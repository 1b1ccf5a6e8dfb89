"""Detection training: the box coder's encode, RetinaNet's matcher and focal loss on hand-made cases, a short
run that lowers the loss, and the sample detector (trained once, cached) reaching a real held-out mAP and
exporting to ONNX."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trtkit.training.detection_loss import (BELOW_LOW, BETWEEN, Matcher, box_iou, retinanet_loss,  # noqa: E402
                                            sigmoid_focal_loss)


def test_encode_inverts_decode_with_torchvisions_weights():
    from trtkit.models.detection.boxes import BoxCoder
    anchors = torch.tensor([[0.0, 0.0, 10.0, 10.0], [20.0, 10.0, 60.0, 30.0]])
    boxes = torch.tensor([[2.0, 1.0, 12.0, 15.0], [25.0, 5.0, 45.0, 45.0]])
    for weights in ((1.0, 1.0, 1.0, 1.0), (10.0, 10.0, 5.0, 5.0)):
        coder = BoxCoder(weights)
        codes = coder.encode(boxes, anchors)
        torch.testing.assert_close(coder.decode(codes, anchors), boxes)
    codes = BoxCoder((1.0, 1.0, 1.0, 1.0)).encode(boxes, anchors)
    # first box: centre (7, 8) against (5, 5), size 10 x 14 against 10 x 10
    torch.testing.assert_close(codes[0], torch.tensor([0.2, 0.3, 0.0, math.log(1.4)]))
    codes = BoxCoder((10.0, 10.0, 5.0, 5.0)).encode(boxes[:1], anchors[:1])
    torch.testing.assert_close(codes[0], torch.tensor([2.0, 3.0, 0.0, 5 * math.log(1.4)]))


def test_box_iou_by_hand():
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    b = torch.tensor([[0.0, 0.0, 10.0, 10.0], [5.0, 0.0, 15.0, 10.0], [10.0, 10.0, 20.0, 20.0], [0.0, 0.0, 5.0, 5.0]])
    torch.testing.assert_close(box_iou(a, b), torch.tensor([[1.0, 50.0 / 150.0, 0.0, 0.25]]))


def test_matcher_thresholds_and_low_quality_matches():
    iou = torch.tensor([[0.60, 0.45, 0.30, 0.10, 0.50],
                        [0.20, 0.30, 0.35, 0.00, 0.30]])
    # anchor 0: 0.6 >= 0.5 -> box 0; 1: 0.45 in [0.4, 0.5) -> ignored; 2: 0.35 < 0.4 -> background, but it is box
    # 1's best anchor -> box 1; 3: background; 4: exactly 0.5 -> foreground (>= high)
    assert Matcher()(iou).tolist() == [0, BETWEEN, 1, BELOW_LOW, 0]
    assert Matcher(allow_low_quality_matches=False)(iou).tolist() == [0, BETWEEN, BELOW_LOW, BELOW_LOW, 0]
    # a low-quality match keeps the anchor's own best box, and ties all count
    tied = torch.tensor([[0.30, 0.30, 0.10], [0.25, 0.05, 0.0]])
    assert Matcher()(tied).tolist() == [0, 0, BELOW_LOW]
    # exactly 0.4 is ignored, not background
    assert Matcher(allow_low_quality_matches=False)(torch.tensor([[0.4, 0.3999]])).tolist() == [BETWEEN, BELOW_LOW]
    # a box that overlaps no anchor claims none; no boxes: all background
    assert Matcher()(torch.tensor([[0.0, 0.0], [0.7, 0.1]])).tolist() == [1, BELOW_LOW]
    assert Matcher()(torch.zeros(0, 3)).tolist() == [BELOW_LOW] * 3


def test_focal_loss_by_hand():
    logits = torch.tensor([0.0, 0.0, 2.0, -3.0])
    targets = torch.tensor([1.0, 0.0, 1.0, 0.0])
    p2 = 1 / (1 + math.exp(-2.0))
    p3 = 1 / (1 + math.exp(3.0))
    expected = [0.25 * 0.25 * math.log(2), 0.75 * 0.25 * math.log(2),
                0.25 * (1 - p2) ** 2 * -math.log(p2), 0.75 * p3 ** 2 * -math.log(1 - p3)]
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets), torch.tensor(expected))
    # gamma 0 and no alpha: plain binary cross-entropy
    bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets, alpha=-1, gamma=0), bce)
    # the easy negative counts far less than the hard one
    easy, hard = sigmoid_focal_loss(torch.tensor([-4.0, 4.0]), torch.tensor([0.0, 0.0]))
    assert hard > 1000 * easy


def test_retinanet_loss_normalises_by_foreground_and_ignores_the_between():
    from trtkit.models.detection.boxes import BoxCoder
    anchors = torch.tensor([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 12.0], [0.0, 0.0, 10.0, 20.0],
                            [50.0, 50.0, 60.0, 60.0]])
    # IoUs with the box [0, 0, 10, 10]: 1, 10/12, 0.5, 0 -> three foreground anchors... make one ignored:
    box = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    iou = box_iou(box, anchors)[0].tolist()
    assert iou[:3] == [1.0, pytest.approx(100 / 120.0), 0.5] and iou[3] == 0
    anchors[2] = torch.tensor([0.0, 0.0, 10.0, 22.0])  # IoU 100/220 = 0.4545: ignored
    logits = torch.zeros(1, 4, 2)
    regressions = torch.zeros(1, 4, 4)
    targets = [(box, torch.tensor([1]))]
    losses = retinanet_loss(logits, regressions, anchors, targets, BoxCoder((1.0, 1.0, 1.0, 1.0)))
    # counted: anchors 0, 1 (foreground, class 1) and 3 (background); 2 foreground anchors
    positive, negative = 0.25 * 0.25 * math.log(2), 0.75 * 0.25 * math.log(2)
    expected = (2 * positive + 2 * negative + 2 * negative) / 2
    assert float(losses["classification"]) == pytest.approx(expected, rel=1e-6)
    # regression: anchor 0 is the box (code 0); anchor 1 needs dy = -1/12, dh = log(10/12)
    assert float(losses["box_regression"]) == pytest.approx((1 / 12.0 + abs(math.log(10 / 12.0))) / 2, rel=1e-5)
    # an image without boxes: everything background, divided by 1
    empty = retinanet_loss(logits, regressions, anchors, [(torch.zeros(0, 4), torch.zeros(0, dtype=torch.int64))],
                           BoxCoder((1.0, 1.0, 1.0, 1.0)))
    assert float(empty["classification"]) == pytest.approx(8 * negative, rel=1e-6)
    assert float(empty["box_regression"]) == 0.0


def test_flips_move_the_boxes_with_the_pixels():
    from trtkit.data.boxes import BoxRecord
    from trtkit.training.detection import augmented
    x = np.zeros((1, 3, 20, 30), np.float32)
    x[0, :, 2:5, 3:9] = 1.0  # an object at x 3..9, y 2..5
    record = BoxRecord("a", 0, (30, 20), [[3, 2, 9, 5]], [0])
    for seed in range(8):
        rng = np.random.RandomState(seed)
        moved, targets = augmented(x.copy(), [record], rng, ("horizontal", "vertical"))
        ys, xs = np.nonzero(moved[0, 0])
        assert targets[0][0].tolist() == [[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]]


def test_windows_move_clip_and_drop_the_boxes_with_the_pixels():
    """``cropped``: each image's window holds its pixels, a box moves and is clipped with it, and one less than
    half inside is dropped (the sample's rule for a mostly hidden object)."""
    from trtkit.training.detection import cropped

    class Offsets(object):  # the window's top, then its left
        def __init__(self, *values):
            self.values = list(values)

        def randint(self, low, high):
            value = self.values.pop(0)
            assert low <= value < high
            return value

    x = np.random.RandomState(0).standard_normal((1, 3, 20, 30)).astype(np.float32)
    boxes = np.array([[3, 2, 9, 5], [0, 0, 4, 4], [20, 10, 30, 20]], np.float32)
    labels = np.array([0, 1, 2])
    for (top, left), kept, kept_labels in (
            ((0, 0), [[3, 2, 9, 5], [0, 0, 4, 4]], [0, 1]),  # the third starts where the window ends
            ((8, 18), [[2, 2, 12, 12]], [2]),
            ((0, 6), [[0, 2, 3, 5]], [0])):  # half of the first inside: kept, clipped; the second all outside
        windows, targets = cropped(x.copy(), [(boxes, labels)], Offsets(top, left), 12)
        assert windows.shape == (1, 3, 12, 12) and np.array_equal(windows[0], x[0, :, top:top + 12, left:left + 12])
        assert targets[0][0].tolist() == kept and targets[0][1].tolist() == kept_labels
    windows, targets = cropped(x, [(boxes, labels)], Offsets(), 32)  # as large as the image: as it is
    assert windows is x and targets[0][0] is boxes


@pytest.mark.extended  # the landing run's cold start trains the sample with fit_detection (its held-out mAP is
def test_a_short_run_lowers_the_loss():  # asserted below) and gpu_check's bit-identical test runs it warm
    from trtkit.contract import InputContract
    from trtkit.data.shape_boxes import draw_shape_boxes
    from trtkit.models.detection import create_detection_model
    from trtkit.training.detection import fit_detection
    images, records = draw_shape_boxes(48, size=64, seed=11)
    torch.manual_seed(0)
    model = create_detection_model("retinanet_sample", num_classes=3, contract=InputContract(size=64,
                                                                                             resize="stretch"))
    record = fit_detection(model, images, records, 40, batch_size=8, lr=3e-3, heldout=(images[:8], records[:8]))
    assert record["loss"] < 0.7 * record["first_loss"]
    assert 0.0 <= record["map50"] <= 1.0 and record["map"] <= record["map50"]
    assert not model.training


def test_records_must_be_in_the_inputs_pixels():
    from trtkit.data.boxes import BoxRecord
    from trtkit.errors import InputError
    from trtkit.models.detection import create_detection_model
    from trtkit.training.detection import fit_detection
    model = create_detection_model("retinanet_sample", num_classes=3)
    with pytest.raises(InputError, match="input's pixels"):
        fit_detection(model, np.zeros((1, 64, 64, 3), np.uint8), [BoxRecord("a", 0, (128, 128), [[0, 0, 9, 9]], [0])],
                      1)


def test_box_map_scores_perfect_and_missing_detections():
    from trtkit.data.boxes import BoxRecord
    from trtkit.training.detection import box_map
    records = [BoxRecord("a", 0, (64, 64), [[0, 0, 10, 10], [20, 20, 40, 44]], [0, 1]),
               BoxRecord("b", 1, (64, 64), [[5, 5, 25, 25]], [1])]
    perfect = [(r.boxes, np.ones(len(r), np.float32), r.labels) for r in records]
    assert box_map(perfect, records, 2) == (pytest.approx(1.0), pytest.approx(1.0))
    half = [(r.boxes[:1], np.ones(1, np.float32), r.labels[:1]) for r in records]  # one of class 1's two found
    map50, _ = box_map(half, records, 2)
    assert map50 == pytest.approx((1.0 + 0.5) / 2, abs=0.01)
    assert box_map([(np.zeros((0, 4)), np.zeros(0), np.zeros(0))] * 2, records, 2) == (0.0, 0.0)


@pytest.fixture(scope="module")
def sample_detector():
    from trtkit.models.sample import sample_detection_model
    return sample_detection_model()


def test_the_sample_detector_reaches_a_real_heldout_map(sample_detector):
    from trtkit.models.detection import infer_detection_layout
    from trtkit.models.sample import sample_detection_data, sample_detection_model
    from trtkit.training.detection import evaluate_detection
    model, path, _ = sample_detector
    assert model.trtkit_name == "retinanet_sample" and model.num_classes == 3
    assert model.input_contract.class_names == ["circle", "square", "triangle"]
    assert model.input_contract.height == 128 and model.input_contract.resize == "stretch"
    images, records = sample_detection_data("heldout")
    scores = evaluate_detection(model, images, records)
    print("held-out mAP@.5 {map50:.3f}, mAP@[.5:.95] {map:.3f}".format(**scores))
    assert scores["map50"] >= 0.5
    assert scores["map50"] == pytest.approx(model.trtkit_meta["map50"], abs=1e-6)
    # the cache reloads through the same code path as every detection checkpoint
    again, again_path, trained = sample_detection_model()
    assert not trained and again_path == path
    assert infer_detection_layout(again.state_dict()) == ("retinanet_sample", 3, {})
    x = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        for a, b in zip(model.eval().decoded(x), again.decoded(x)):
            torch.testing.assert_close(a, b)


def test_the_sample_detector_exports_to_onnx(sample_detector, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from trtkit.models.detection.export import deployable
    model = deployable(sample_detector[0].eval())
    assert model.detection_head.levels == [(8, 3), (16, 3), (32, 3), (64, 3), (128, 3)]
    from trtkit.onnx.export import export_onnx
    path = str(tmp_path / "sample.onnx")
    exporter, _ = export_onnx(model, path)  # torch.onnx.export, its current (dynamo) exporter where it has one
    x = torch.randn(2, 3, 128, 128)
    with torch.no_grad():
        expected = model(x).numpy()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    assert got.shape == expected.shape == (2, 1023, 7)
    assert np.abs(got - expected).max() < 1e-3


def test_ssd_loss_mines_three_hard_negatives_per_positive():
    from trtkit.models.detection.boxes import BoxCoder
    from trtkit.training.detection_loss import ssd_loss, ssd_matches
    anchors = torch.tensor([[0.0, 0.0, 10.0, 10.0]] + [[20.0 * k, 40.0, 20.0 * k + 10, 50.0] for k in range(8)])
    box = torch.tensor([[1.0, 0.0, 10.0, 10.0]])  # IoU 0.9 with anchor 0 only
    targets = [(box, torch.tensor([2]))]
    assert ssd_matches(box, anchors).tolist() == [0] + [BELOW_LOW] * 8
    # a far box with no anchor above 0.5 still takes its best one
    assert ssd_matches(torch.tensor([[0.0, 40.0, 6.0, 50.0]]), anchors).tolist()[:2] == [BELOW_LOW, 0]
    logits = torch.zeros(1, 9, 3)
    logits[0, 1:, 0] = torch.arange(8.0)  # background anchors, ever easier: 1, 2, 3 the hardest (lowest)
    regressions = torch.zeros(1, 9, 4)
    losses = ssd_loss(logits, regressions, anchors, targets, BoxCoder((10.0, 10.0, 5.0, 5.0)))
    ce = torch.nn.functional.cross_entropy(logits[0], torch.tensor([2] + [0] * 8), reduction="none")
    expected = ce[0] + ce[1] + ce[2] + ce[3]  # the positive and its 3 hardest negatives, / 1 positive
    torch.testing.assert_close(losses["classification"], expected)
    codes = BoxCoder((10.0, 10.0, 5.0, 5.0)).encode(box, anchors[:1])[0]
    smooth = torch.where(codes.abs() < 1, 0.5 * codes ** 2, codes.abs() - 0.5).sum()
    torch.testing.assert_close(losses["box_regression"], smooth)
