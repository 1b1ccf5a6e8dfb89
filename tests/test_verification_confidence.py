"""Verification that uses the data it is given and says how sure it is (trtkit.intervals, data.plan, the gate
and the budget of --precision auto), on constructed cases whose truth is known."""

import json
import os

import numpy as np
import pytest

from trtkit.intervals import paired_difference, wilson
from trtkit.pipeline.verify import Comparison


# ------------------------------------------------------------------ the intervals themselves

def test_wilson_and_the_paired_interval_cover_the_truth_at_their_level():
    random = np.random.RandomState(0)
    for p, n in ((0.985, 160), (0.9, 300), (0.5, 50), (0.999, 2000)):
        hits = 0
        for _ in range(1000):
            low, high = wilson(random.binomial(n, p), n)
            hits += low <= p <= high
        assert hits >= 930, (p, n, hits)  # 95% intervals: at least 93% of 1000 draws (binomial noise ~0.7%)
    # paired: FP32 right/variant wrong on 2%, the reverse on 1%: the true drop is 1 point
    hits = 0
    for _ in range(1000):
        a, b, c, d = random.multinomial(300, [0.88, 0.02, 0.01, 0.09])
        low, high = paired_difference(a, b, c, d)
        hits += low <= 0.01 <= high
    assert hits >= 930, hits


def test_160_images_that_all_agree_show_at_least_97_7_percent_not_100():
    low, high = wilson(160, 160)
    assert high == 1.0 and 0.976 < low < 0.977
    assert wilson(0, 0) is None
    # an interval narrows as images are added
    assert wilson(1600, 1600)[0] > low


def _stand_in(population, disagree, seed=0, classes=10):
    """FP32 logits and labels of ``population`` images, and a stand-in variant's logits that decide otherwise
    on exactly ``disagree`` of them (drawn with a fixed seed): the truth every interval must cover."""
    random = np.random.RandomState(seed)
    reference = random.randn(population, classes).astype(np.float32)
    labels = reference.argmax(axis=1)
    wrong = random.rand(population) < 0.1  # FP32 is right on about 90%
    labels[wrong] = (labels[wrong] + 1) % classes
    variant = reference.copy()
    flipped = random.choice(population, disagree, replace=False)
    variant[flipped, (reference[flipped].argmax(axis=1) + 1) % classes] += 10.0
    return reference, variant, labels


def test_a_stand_in_that_disagrees_on_k_of_n_images_is_covered_by_its_interval():
    reference, variant, labels = _stand_in(800, 11)
    whole = Comparison()
    whole.update(variant, reference, labels)
    result = whole.result()
    assert result["counts"]["agree"] == 789 and result["top1_agreement"] == pytest.approx(789 / 800.0)
    truth_agreement = 789 / 800.0
    truth_drop = result["reference_accuracy"] - result["accuracy"]
    low, high = result["intervals"]["top1_agreement"]
    assert low < truth_agreement < high
    drop_low, drop_high = result["intervals"]["accuracy_drop"]
    assert drop_low <= truth_drop <= drop_high
    # samples of 160 of the 800 images, as a 20% held-out split would give: the interval covers the truth
    random = np.random.RandomState(1)
    covered, covered_drop, draws = 0, 0, 400
    for _ in range(draws):
        chosen = random.choice(800, 160, replace=False)
        part = Comparison()
        part.update(variant[chosen], reference[chosen], labels[chosen])
        intervals = part.result()["intervals"]
        covered += intervals["top1_agreement"][0] <= truth_agreement <= intervals["top1_agreement"][1]
        covered_drop += intervals["accuracy_drop"][0] <= truth_drop <= intervals["accuracy_drop"][1]
    assert covered >= 0.93 * draws and covered_drop >= 0.93 * draws, (covered, covered_drop)


# ------------------------------------------------------------------ the gate and the budget

def _record(name, precision, variant, reference, labels, ips, status="ok"):
    comparison = Comparison()
    comparison.update(variant, reference, labels)
    return {"name": name, "precision": precision, "verify": comparison.result(), "status": status,
            "throughput_ips": ips}


def test_a_failing_int8_is_not_told_to_try_the_method_it_used(capsys):
    """Blind test (MediaPipe palm detection): an INT8 calibrated with --calib-method percentile failed its gate
    and was told to try percentile; the advice now leaves out the method the artifact used."""
    from trtkit.pipeline.gate import judge
    from trtkit.pipeline.run import gate_summary
    reference, _, labels = _stand_in(160, 0)
    record = _record("m.int8", "int8", np.roll(reference, 1, axis=0), reference, labels, 100.0)
    record["calibration"] = {"method": "percentile"}
    capsys.readouterr()
    judge(record, 0.98)
    said = capsys.readouterr().err
    assert record["status"] == "failing" and "--calib-method (minmax, entropy; this one used percentile)" in said
    summary = gate_summary({"artifacts": [record]})
    assert "this one used percentile" in summary and "(percentile, minmax)" not in summary


def test_a_fine_tuned_int8_is_judged_by_accuracy_when_it_has_labels(capsys):
    """Blind test (digit-recognizer-py's CNN, 52.6% accurate on the sample's digits): QAT fine-tuned it to 88.3%,
    agreeing 57.7% with FP32, and the gate called it failing with advice about range methods it never used. A
    QAT variant verified with labels is judged by its accuracy against FP32's; without labels, by agreement."""
    from trtkit.pipeline.gate import judge
    reference, _, labels = _stand_in(400, 0)
    fixed = reference.copy()  # right wherever FP32 was wrong: about 10% fewer agreements, 10 points more accurate
    wrong = reference.argmax(axis=1) != labels
    fixed[wrong, labels[wrong]] += 20.0
    record = _record("m.int8", "int8", fixed, reference, labels, 100.0)
    record["int8_method"] = "qat"
    capsys.readouterr()
    judge(record, 0.98)
    assert record["verify"]["top1_agreement"] < 0.95 and record["status"] == "ok" and record["significant"] is True
    assert "judged by accuracy" in record["status_detail"] and record["max_accuracy_drop"] == pytest.approx(0.02)
    # the same figures from a post-training INT8 fail: it must decide as FP32 does
    ptq = _record("m.int8", "int8", fixed, reference, labels, 100.0)
    judge(ptq, 0.98)
    assert ptq["status"] == "failing"
    # a fine-tune that got worse: 8% of FP32's right answers lost
    worse = reference.copy()
    lost = np.flatnonzero(~wrong)[:32]
    worse[lost, (labels[lost] + 1) % 10] += 20.0
    record = _record("m.int8", "int8", worse, reference, labels, 100.0)
    record["int8_method"] = "qat"
    capsys.readouterr()
    judge(record, 0.98)
    said = capsys.readouterr().err
    assert record["status"] == "failing" and "--qat-steps" in said and "--calib-method" not in said
    # without labels the agreement gate stands, with the fine-tune's advice
    record = _record("m.int8", "int8", fixed, reference, None, 100.0)
    record["int8_method"] = "qat"
    judge(record, 0.98)
    assert record["status"] == "failing" and "agreement" in record["status_detail"]
    assert "judged by accuracy" not in record["status_detail"]


def test_a_gate_passed_on_the_estimate_but_not_its_bound_says_so():
    from trtkit.pipeline.gate import judge
    reference, _, labels = _stand_in(160, 0)
    record = _record("m.int8", "int8", reference, reference, labels, 100.0)
    judge(record, 0.98)
    assert record["status"] == "ok" and record["significant"] is False
    assert record["status_detail"].startswith("passes, not significant at 160 images")
    reference, _, labels = _stand_in(1000, 0)
    record = _record("m.int8", "int8", reference, reference, labels, 100.0)
    judge(record, 0.98)
    assert record["status"] == "ok" and record["significant"] is True and "status_detail" not in record


def test_auto_refuses_a_candidate_whose_drop_cannot_be_shown_within_the_budget():
    from trtkit.search.select import choose
    reference, int8, labels = _stand_in(300, 0)  # INT8 agrees on all 300: its measured drop is 0
    records = [_record("m.fp32", "fp32", reference, reference, labels, 100.0),
               _record("m.int8", "int8", int8, reference, labels, 300.0)]
    selection = choose(records, 0.3, "accuracy")
    rows = dict((r["name"], r) for r in selection["candidates"])
    assert rows["m.int8"]["drop"] == 0.0 and rows["m.int8"]["within_on_estimate"]
    assert not rows["m.int8"]["within_budget"] and rows["m.int8"]["drop_upper"] > 0.3
    assert selection["chosen"] == "m.fp32"  # slower, but the only one shown within 0.3 points
    needed = selection["unresolved"]["images_needed"]
    assert selection["unresolved"]["name"] == "m.int8" and needed > 300
    note = [n for n in selection["notes"] if "cannot show" in n]
    assert len(note) == 1 and "about {} images would".format(needed) in note[0]
    # the number it names is about enough (at the rates measured: FP32's accuracy moves the bound a little): the
    # same perfect agreement on 10% more images is shown within the budget
    reference, int8, labels = _stand_in(int(needed * 1.1), 0)
    records = [_record("m.fp32", "fp32", reference, reference, labels, 100.0),
               _record("m.int8", "int8", int8, reference, labels, 300.0)]
    assert choose(records, 0.3, "accuracy")["chosen"] == "m.int8"
    # judged on the point estimate only when asked, and said so
    records = [_record("m.fp32", "fp32", reference[:300], reference[:300], labels[:300], 100.0),
               _record("m.int8", "int8", int8[:300], reference[:300], labels[:300], 300.0)]
    selection = choose(records, 0.3, "accuracy", rule="estimate")
    assert selection["chosen"] == "m.int8" and selection["budget_rule"] == "estimate"
    assert any("measured drops" in n for n in selection["notes"])
    # a candidate slower than the choice anyway is not "unresolved", but still said in one line
    records[1]["throughput_ips"] = 50.0
    selection = choose(records, 0.3, "accuracy")
    assert selection["chosen"] == "m.fp32" and "unresolved" not in selection
    assert [n for n in selection["notes"] if "keeps the budget on the measured drop but not" in n]


def test_a_drop_over_the_budget_is_never_resolved_by_more_images():
    from trtkit.search.select import choose, images_to_show
    reference, int8, labels = _stand_in(800, 40)  # disagrees on 5%
    record = _record("m.int8", "int8", int8, reference, labels, 300.0)
    assert images_to_show(record, "agreement", 1.0) is None
    records = [_record("m.fp32", "fp32", reference, reference, labels, 100.0), record]
    selection = choose(records, 1.0, "agreement")
    assert selection["chosen"] == "m.fp32" and "unresolved" not in selection
    assert any("over the budget" in n for n in selection["notes"])


# ------------------------------------------------------------------ segmentation: over images, not pixels

def test_dense_intervals_are_over_images_and_cover_the_truth():
    from trtkit.pipeline.dense import DenseComparison
    random = np.random.RandomState(0)
    population, size = 400, 16
    reference = random.randn(population, 3, size, size).astype(np.float32)
    variant = reference.copy()
    # a third of the images lose a whole 8x8 block to class 2, so pixels of one image move together
    hit = random.rand(population) < 1.0 / 3
    variant[hit, 2, :8, :8] += 10.0
    whole = DenseComparison()
    whole.update(variant, reference)
    truth = whole.result()["pixel_agreement"]
    covered, draws = 0, 60
    for _ in range(draws):
        chosen = random.choice(population, 80, replace=False)
        part = DenseComparison()
        part.update(variant[chosen], reference[chosen])
        low, high = part.result()["intervals"]["pixel_agreement"]
        covered += low <= truth <= high
    assert covered >= 0.88 * draws, covered  # a 1000-replicate percentile bootstrap of 80 images: near its 95%
    # pixels as if independent would give an interval ~50x narrower: this one is as wide as the images make it
    part = DenseComparison()
    part.update(variant[:80], reference[:80])
    low, high = part.result()["intervals"]["pixel_agreement"]
    assert high - low > 0.02
    # nothing differs: the images' own bound, not a zero-width interval
    same = DenseComparison()
    same.update(reference[:80], reference[:80])
    intervals = same.result()["intervals"]
    assert intervals["pixel_agreement"][1] == 1.0 and intervals["pixel_agreement"][0] == pytest.approx(
        wilson(80, 80)[0], abs=1e-6)


def test_dense_mask_drop_is_paired_with_fp32s_own_and_few_differences_get_the_images_bound():
    from trtkit.pipeline.dense import DenseComparison
    random = np.random.RandomState(3)
    reference = random.randn(200, 2, 8, 8).astype(np.float32)
    masks = reference.argmax(axis=1)
    variant = reference.copy()
    variant[:60, :, :2, :2] *= -1.0  # 60 of 200 images flip a 2x2 corner: the variant loses mIoU on the masks
    comparison = DenseComparison()
    comparison.update(variant, reference, masks)
    result = comparison.result()
    intervals = result["intervals"]
    assert "bootstrap" in intervals["method"]
    drop = result["reference_miou"] - result["miou"]
    assert drop > 0 and intervals["miou_drop"][0] <= drop <= intervals["miou_drop"][1]
    assert intervals["accuracy_drop"] == intervals["miou_drop"]
    # resampled alike: the drop's interval is narrower than the two mIoUs' intervals side by side would allow
    assert intervals["miou_drop"][1] - intervals["miou_drop"][0] < (intervals["miou"][1] - intervals["miou"][0]) + (
        intervals["reference_miou"][1] - intervals["reference_miou"][0])
    # one pixel of one image differs: no bootstrap of that (it gave a bound of 0.004 points on 160 images)
    few = variant[:160].copy()
    few[:] = reference[:160]
    few[0, :, 0, 0] *= -1.0
    comparison = DenseComparison()
    comparison.update(few, reference[:160], masks[:160])
    intervals = comparison.result()["intervals"]
    assert "images' own bound" in intervals["method"]
    assert intervals["agreement_drop"][1] >= 1.0 - wilson(159, 160)[0] - 1e-6 > 0.02
    assert intervals["miou_drop"][0] < 0.0 < intervals["miou_drop"][1]


# ------------------------------------------------------------------ the data plan, end to end

def _tiny_classifier(path):
    """A 3-class ONNX classifier of 16x16 images: the mean of each channel, scaled."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], (10.0 * np.eye(3)).ravel().tolist())
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])
    graph = helper.make_graph(
        [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=0),
         helper.make_node("MatMul", ["m", "w"], ["logits"])], "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], [weight, axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _class_folder(root, count, seed):
    """``count`` labelled 16x16 PNGs in red/green/blue class folders (the class channel is the brightest)."""
    from PIL import Image
    random = np.random.RandomState(seed)
    for index in range(count):
        label = index % 3
        pixels = random.randint(0, 120, size=(16, 16, 3)).astype(np.uint8)
        pixels[..., label] += 100
        folder = os.path.join(root, ("red", "green", "blue")[label])
        if not os.path.isdir(folder):
            os.makedirs(folder)
        Image.fromarray(pixels).save(os.path.join(folder, "{:04d}.png".format(index)))
    return root


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("confidence")
    return {"model": _tiny_classifier(str(root / "tiny.onnx")),
            "data": _class_folder(str(root / "data"), 800, 0),
            "calib": _class_folder(str(root / "calib"), 256, 1)}


def _build(folders, out, **keywords):
    import trtkit
    return trtkit.build(onnx=folders["model"], input_size=16, resize="stretch", backend="onnxruntime",
                        bench_seconds=0, out=out, class_names=["red", "green", "blue"], **keywords)


def test_the_default_build_verifies_on_all_800_images_when_calibration_has_its_own(folders, tmp_path, capsys):
    result = _build(folders, str(tmp_path / "b"), precision="fp32,int8", data=folders["data"],
                    calib_data=folders["calib"], calib_images=512)
    manifest = json.load(open(os.path.join(result.dir, "manifest.json")))
    plan = manifest["data"]["plan"]
    assert manifest["data"]["images"] == 800 and plan["verify"]["images"] == 800
    assert plan["separate_calibration_data"] and "calibration has data of its own" in plan["verify"]["why"]
    assert plan["calibration"]["images"] == 256 and plan["calibration"]["split"] == "all"
    for artifact in manifest["artifacts"]:
        verify = artifact["verify"]
        assert verify["images"] == 800 and verify["reference_accuracy"] > 0.9
        low, high = verify["intervals"]["top1_agreement"]
        assert low <= verify["top1_agreement"] <= high
        assert verify["intervals"]["accuracy_drop"][0] <= 0.0 <= verify["intervals"]["accuracy_drop"][1] or \
            artifact["precision"] != "fp32"
    err = capsys.readouterr().err
    assert "images: verification 800" in err and "calibration 256" in err
    from trtkit.pipeline.table import format_table
    assert "(>= " in format_table(result.manifest)


def test_one_folder_for_both_says_how_it_was_shared_and_never_verifies_a_calibration_image(folders, tmp_path):
    from trtkit.data.plan import plan_data
    from trtkit.contract import InputContract
    contract = InputContract(size=16, resize="stretch")
    plan = plan_data(folders["data"], None, contract, calib_images=512, tune_images=256)
    calibration = set(plan.calibration.selection.names)
    tune = set(plan.tune.selection.names)
    verify = set(plan.verify.selection.names)
    assert len(calibration) == 512 and not plan.tune.reuses_calibration
    assert len(tune) == 128  # the 640-image train part less calibration's 512
    assert not calibration & tune and not calibration & verify and not tune & verify
    assert len(calibration) + len(tune) + len(verify) == 800  # every image has a use
    # calibration data that is all used: the tune split takes a quarter of --data, never calibration's images
    plan = plan_data(folders["data"], folders["calib"], contract, calib_images=512, tune_images=256)
    assert not plan.tune.reuses_calibration and len(plan.tune.selection) == 200
    assert len(plan.verify.selection) == 600 and not set(plan.tune.selection.names) & set(plan.verify.selection.names)
    assert "calibration left none of its own" in plan.tune.why
    # ... and where no other image exists, it must reuse them, and says so
    plan = plan_data(folders["calib"], None, contract, calib_images=256, tune_images=64)
    assert plan.tune.reuses_calibration and "calibration took 205 of the 205" in plan.tune.why
    assert len(plan.verify.selection) == 51  # the 20% held out: a quarter of it (12) is too few to tune on
    result = _build(folders, str(tmp_path / "b"), precision="fp32,int8", data=folders["data"], calib_images=512)
    record = json.load(open(os.path.join(result.dir, "manifest.json")))["data"]["plan"]
    assert record["verify"]["images"] == 288 and record["calibration"]["images"] == 512
    assert "did not take" in record["verify"]["why"]


def test_a_source_the_model_learned_is_verified_on_its_held_out_part_only(folders):
    """The sample model (and a checkpoint whose metadata names its data) learned the seeded 80% part: those
    images are never verified on, whatever calibration leaves of them."""
    from trtkit.contract import InputContract
    from trtkit.data.plan import plan_data
    from trtkit.data.sources import split_positions
    contract = InputContract(size=16, resize="stretch")
    plan = plan_data(folders["data"], None, contract, calib_images=64, trained_on=folders["data"])
    assert len(plan.verify.selection) == len(split_positions(800, "heldout")) == 160
    assert "checkpoint says it was trained on it" in plan.verify.why
    heldout = set(plan_data(folders["data"], None, contract, calib_images=64, trained_on=folders["data"],
                            calibration_needed=False).verify.selection.names)
    assert set(plan.verify.selection.names) == heldout
    sample = plan_data("sample", None, contract, calib_images=512, tune_images=256)
    assert len(sample.verify.selection) == 359 and "sample model learned" in sample.verify.why
