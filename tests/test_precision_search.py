"""--precision auto: candidates, per-layer sensitivity, mixed INT8 by bisection, and a speed-checked choice."""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trtkit.errors import InputError  # noqa: E402
from trtkit.search.select import budget_metric, choose  # noqa: E402


def _record(name, precision, agreement, accuracy, ips, reference_accuracy=0.9, status="ok"):
    return {"name": name, "precision": precision, "throughput_ips": ips, "status": status,
            "verify": {"top1_agreement": agreement, "accuracy": accuracy, "reference_accuracy": reference_accuracy}}


def test_a_candidate_failing_its_gate_is_never_chosen_and_a_near_chance_reference_switches_to_agreement():
    # measured on an earlier main: the sample at 224 (reference 17% accurate on 10 classes), every INT8
    # candidate failing its gate at 73-89% agreement; int8-percentile-openvino "gained" 1.1 accuracy points
    records = [_record("m.fp32", "fp32", 1.0, 0.170, 100.0, reference_accuracy=0.170),
               _record("m.fp16", "fp16", 0.995, 0.171, 90.0, reference_accuracy=0.170),
               _record("m.int8-entropy", "int8", 0.734, 0.160, 300.0, 0.170, status="failing"),
               _record("m.int8-percentile-openvino", "int8", 0.889, 0.181, 400.0, 0.170, status="failing")]
    metric, warning = budget_metric(True, 0.170, 10)
    assert metric == "agreement" and "near chance" in warning and "10.0%" in warning
    selection = choose(records, 0.5, metric)
    assert selection["chosen"] == "m.fp32"
    # even when the budget is in accuracy, the gate decides: the INT8 candidate within it is not chosen
    selection = choose(records, 0.5, "accuracy")
    assert selection["chosen"] == "m.fp32"
    assert any("m.int8-percentile-openvino is within the budget but fails its verification gate" in n
               for n in selection["notes"])
    assert not dict((r["name"], r) for r in selection["candidates"])["m.int8-entropy"]["passes_gate"]
    # a reference clearly above chance keeps the budget in accuracy; no labels: agreement, without a warning
    assert budget_metric(True, 0.90, 10) == ("accuracy", None)
    assert budget_metric(True, 0.70, 2) == ("accuracy", None) and budget_metric(True, 0.60, 2)[0] == "agreement"
    assert budget_metric(False, None, 10) == ("agreement", None)


def test_the_fastest_within_budget_wins_and_slow_int8_is_said():
    records = [_record("m.fp32", "fp32", 1.0, 0.90, 100.0), _record("m.fp16", "fp16", 1.0, 0.90, 90.0),
               _record("m.int8-entropy", "int8", 0.97, 0.88, 300.0), _record("m.mixed-k2", "mixed", 0.995, 0.898, 200.0)]
    selection = choose(records, 0.5, "accuracy")
    assert selection["chosen"] == "m.mixed-k2"  # int8 is faster but loses 2 points
    rows = dict((r["name"], r) for r in selection["candidates"])
    assert not rows["m.int8-entropy"]["within_budget"] and rows["m.mixed-k2"]["within_budget"]
    assert any("m.int8-entropy loses 2.000 points" in n for n in selection["notes"])
    near = [_record("m.fp32", "fp32", 1.0, 0.90, 100.0), _record("m.int8-entropy", "int8", 0.99, 0.88995, 300.0)]
    notes = choose(near, 1.0, "accuracy")["notes"]  # just over the budget: said so, not "1.00 ... budget of 1"
    assert any("loses 1.005 points" in n and "over the budget of 1" in n for n in notes), notes
    # on a backend where quantized graphs run slower than float: the faster float variant, and why
    slow = [_record("m.fp32", "fp32", 1.0, 0.90, 100.0), _record("m.int8-entropy", "int8", 1.0, 0.90, 60.0)]
    selection = choose(slow, 0.5, "accuracy")
    assert selection["chosen"] == "m.fp32"
    assert any("slower than m.fp32" in n for n in selection["notes"])
    # without labels the budget is in agreement points
    assert choose(records, 0.6, "agreement")["chosen"] == "m.mixed-k2"
    with pytest.raises(InputError, match="verified and timed"):
        choose([_record("m.fp32", "fp32", 1.0, 0.9, None)], 0.5, "accuracy")


def test_a_speed_tie_goes_to_the_candidate_that_agrees_best():
    # measured on chessvision_pieces: int8-entropy and int8-percentile-openvino within 2% of each other,
    # the faster one agreeing on one image fewer
    records = [_record("m.fp32", "fp32", 1.0, 0.90, 100.0),
               _record("m.int8-entropy", "int8", 0.990, 0.905, 300.0),
               _record("m.int8-percentile-openvino", "int8", 0.995, 0.905, 295.0),
               _record("m.int8-minmax", "int8", 1.0, 0.90, 250.0)]
    selection = choose(records, 0.5, "accuracy")
    assert selection["chosen"] == "m.int8-percentile-openvino"  # 1.7% slower: a tie; agrees better
    assert any("as fast as m.int8-entropy" in n for n in selection["notes"])
    records[2]["throughput_ips"] = 280.0  # 6.7% slower: not a tie, the faster one wins
    assert choose(records, 0.5, "accuracy")["chosen"] == "m.int8-entropy"


def test_a_candidate_that_missed_on_the_tune_split_is_not_chosen_for_passing_a_small_held_out_set():
    """A blind test: on a MobileNetV2 face-mask classifier, plain INT8 passed its 98% gate on 59 of 60 held-out
    images (OpenVINO) and was chosen, while the search had measured it at 91% on its 240 tune images."""
    from trtkit.search.select import keeps_tune_split
    records = [_record("m.fp32", "fp32", 1.0, 0.82, 100.0, 0.82), _record("m.fp16", "fp16", 1.0, 0.82, 95.0, 0.82),
               _record("m.int8-percentile-openvino", "int8", 0.9833, 0.83, 300.0, 0.82),
               _record("m.mixed-k40-openvino", "mixed", 0.99, 0.82, 150.0, 0.82)]
    for record in records:
        record["min_agreement"] = {"fp32": 0.999, "fp16": 0.99}.get(record["precision"], 0.98)
    records[2]["tune"] = {"agreement": 0.9125, "accuracy": 0.80, "drop": 2.1}
    records[3]["tune"] = {"agreement": 0.985, "accuracy": 0.815, "drop": 0.4}
    assert not keeps_tune_split(records[2], 1.0) and keeps_tune_split(records[3], 1.0)
    assert keeps_tune_split(records[0], 1.0)  # FP32 has no tune figures to miss
    selection = choose(records, 1.0, "accuracy")
    assert selection["chosen"] == "m.mixed-k40-openvino"
    rows = dict((r["name"], r) for r in selection["candidates"])
    assert rows["m.int8-percentile-openvino"]["passes_gate"] and not rows["m.int8-percentile-openvino"][
        "keeps_tune_split"]
    assert any("m.int8-percentile-openvino passes on the held-out images but not on the larger tune split" in n
               and "agreement 91.25%" in n for n in selection["notes"]), selection["notes"]
    records[2]["tune"]["agreement"] = 0.99  # within the budget and the gate there too: chosen, the fastest
    records[2]["tune"]["drop"] = 0.5
    assert choose(records, 1.0, "accuracy")["chosen"] == "m.int8-percentile-openvino"


class OutlierNet(torch.nn.Module):
    """A small digits CNN; ``add_outlier`` makes one channel 1000x larger and the next layer 1000x smaller
    for it: the same function in float, but per-tensor INT8 ranges of that tensor crush every other channel."""

    def __init__(self):
        super(OutlierNet, self).__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.conv3 = torch.nn.Conv2d(32, 32, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))

    def add_outlier(self, factor=1000.0):
        with torch.no_grad():
            self.conv1.weight[0] *= factor
            self.conv1.bias[0] *= factor
            self.conv2.weight[:, 0] /= factor


@pytest.fixture(scope="module")
def outlier_model():
    from trtkit.contract import InputContract
    from trtkit.data import load_images
    torch.manual_seed(0)
    contract = InputContract(size=32, resize="stretch")
    train = load_images("sample", contract, split="train")
    model = OutlierNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    x, y = torch.from_numpy(train.images), torch.from_numpy(train.labels)
    for _ in range(6):
        for start in range(0, len(x), 64):
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[start:start + 64]), y[start:start + 64]).backward()
            optimizer.step()
    model.eval()
    model.add_outlier()
    return model


def test_auto_sizes_a_mixed_variant_and_judges_every_candidate_by_what_the_images_show(outlier_model, tmp_path):
    """The budget is judged on what the held-out images show (the upper end of the drop's 95% interval). This
    test asserted before that a mixed variant kept a 0.3-point budget on 300 held-out images: no candidate can be
    shown within that by 300 images, and which way the noise fell depended on the CPU's INT8 kernels (it failed
    on a Xeon with VNNI). Now: the mixed variant is built, and each candidate's verdict is what its interval says."""
    import trtkit
    result = trtkit.build(model=outlier_model, input_size=32, resize="stretch", precision="auto", max_drop=1.0,
                          tune_images=128, calib_images=128, backend="onnxruntime", out=str(tmp_path / "b"),
                          verify_images="all")
    manifest = result.manifest
    selection = manifest["selection"]
    plan = manifest["data"]["plan"]
    # the model learned the sample's train part: verification keeps to its held-out part, never a training image
    assert plan["verify"]["images"] == 359 and "held-out part" in plan["verify"]["why"]
    assert not plan["tune"].get("reuses_calibration")
    rows = dict((r["name"].split(".", 1)[1], r) for r in selection["candidates"])
    assert set(rows) >= {"fp32", "fp16", "int8-entropy", "int8-percentile"}
    assert selection["max_drop"] == 1.0 and selection["metric"] == "accuracy" and selection["budget_rule"] == "bound"
    plain = [r for name, r in rows.items() if name.startswith("int8-")]
    assert all(not r["within_budget"] for r in plain), plain  # the outlier breaks plain INT8
    mixed = [r for name, r in rows.items() if name.startswith("mixed-k")]
    assert len(mixed) == 1 and mixed[0]["kept_layers"], rows
    assert mixed[0]["precision"] == "mixed"
    for row in rows.values():  # within the budget: the measured drop and, but for FP32, its 95% upper bound
        assert row["within_budget"] == (row["drop"] <= 1.0 + 1e-9 and (
            row["precision"] == "fp32" or row["drop_upper"] <= 1.0 + 1e-9)), row
    if not mixed[0]["within_budget"]:  # said why: over the budget, or not shown within it by these images
        assert any(mixed[0]["name"] in note for note in selection["notes"]), selection["notes"]
    chosen = rows[selection["chosen"].split(".", 1)[1]]
    within = [r for r in rows.values() if r["within_budget"]]
    from trtkit.search.select import SPEED_TIE
    fastest = max(r["throughput_ips"] for r in within if r["passes_gate"])  # the fastest within budget, or a tie
    assert chosen["throughput_ips"] >= (1 - SPEED_TIE) * fastest  # with it that agrees better with FP32
    assert chosen["throughput_ips"] == fastest or any("agrees better" in n for n in selection["notes"])
    if chosen["precision"] in ("fp32", "fp16") and mixed[0]["within_budget"] and mixed[0]["passes_gate"]:
        # the mixed variant kept the budget and was slower here: said so
        assert any(mixed[0]["name"] in note and "slower" in note for note in selection["notes"])
    for name in manifest["search"]["reports"]:
        assert os.path.isfile(os.path.join(result.dir, name))
    table = json.load(open(os.path.join(result.dir, "outliernet.sensitivity.json")))["layers"]
    # conv1..conv3 and the classifier (INT8 input and weights, float logits), ranked by the drop each causes
    assert table[0]["drop"] >= table[-1]["drop"] and len(table) == 4
    assert "node_linear" in [row["layer"] for row in table]
    assert table[0]["layer"] in mixed[0]["kept_layers"]
    assert set(manifest["files"]) == set(os.listdir(result.dir)) - {"manifest.json"}
    _the_chosen_artifact_is_the_default(result, selection["chosen"], tmp_path)


def _the_chosen_artifact_is_the_default(result, chosen, tmp_path):
    """trtkit.load, trtkit bench and export-triton take the chosen artifact unless told otherwise."""
    import trtkit
    from trtkit.bench.plan import BenchOptions, plan_from_manifest
    from trtkit.deploy.triton import select_artifacts
    from trtkit.pipeline.manifest import open_build
    build = open_build(result.dir)
    manifest = build.manifest
    assert [a["name"] for a in select_artifacts(manifest)] == [chosen]
    assert len(select_artifacts(manifest, precisions=["fp32", "fp16"])) == 2
    variants = plan_from_manifest(build, BenchOptions(), torch_modes=None)
    assert [v.precision for v in variants] == [manifest_precision(manifest, chosen)]
    with trtkit.load(result.dir) as classifier:
        assert os.path.basename(classifier.path) == [a["path"] for a in manifest["artifacts"] if a["name"] == chosen][0]


def manifest_precision(manifest, name):
    return [a["precision"] for a in manifest["artifacts"] if a["name"] == name][0]


def test_tensorrt_rtx_builds_the_mixed_tensorrt_graph(outlier_model, tmp_path):
    pytest.importorskip("tensorrt_rtx")
    from trtkit.backends import get_backend
    from trtkit.backends.base import BuildInputs
    from trtkit.contract import InputContract
    from trtkit.onnx.export import export_onnx
    from trtkit.precision.config import CalibrationConfig
    from trtkit.pipeline.variants import VariantMaker
    from trtkit.search.candidates import make_candidates
    from trtkit.search.config import SearchConfig
    contract = InputContract(size=32, resize="stretch")
    fp32 = str(tmp_path / "m.fp32.onnx")
    export_onnx(outlier_model, fp32, contract=contract)
    maker = VariantMaker(fp32, "m", contract, CalibrationConfig(images=64), "sample", "tensorrt", str(tmp_path))
    candidates, search = make_candidates(maker, SearchConfig(max_drop=0.3, tune_images=64))
    mixed = dict((c.meta["kept_in"], c) for c in candidates if c.precision == "mixed")
    assert sorted(mixed) == ["fp16", "fp32"] and mixed["fp32"].meta["kept_layers"]
    assert mixed["fp16"].meta["kept_layers"] == mixed["fp32"].meta["kept_layers"]
    import onnx
    graph = onnx.load(mixed["fp16"].onnx_path)
    inits = dict((i.name, i.data_type) for i in graph.graph.initializer)
    kept = [n for n in graph.graph.node if n.name in set(mixed["fp16"].meta["kept_layers"])]
    assert kept and all(inits[n.input[1]] == onnx.TensorProto.FLOAT16 for n in kept), "kept layers are not FP16"
    assert any(n.op_type == "QuantizeLinear" for n in graph.graph.node), "the FP16 twin lost its INT8 layers"
    for kept_in, candidate in sorted(mixed.items()):
        engine = str(tmp_path / "m.mixed-{}.engine".format(kept_in))
        info = get_backend("tensorrt-rtx").build(candidate.onnx_path, "mixed", engine, BuildInputs(contract=contract))
        assert os.path.getsize(engine) > 0 and info["strongly_typed"]


def test_auto_is_alone_and_its_options_are_checked():
    from trtkit.pipeline.options import parse_precisions
    from trtkit.search.config import SearchConfig
    with pytest.raises(InputError, match="give it alone"):
        parse_precisions("auto,fp16")
    with pytest.raises(InputError, match="--max-drop"):
        SearchConfig(max_drop=-1)
    with pytest.raises(InputError, match="--tune-images"):
        SearchConfig(tune_images=2)
    assert np.isclose(SearchConfig(max_drop="0.25").max_drop, 0.25)


def test_a_tune_split_near_chance_ranks_candidates_by_agreement():
    """Random-weight DeepLabV3 on the shapes masks (measured): FP32's tune mIoU was ~0, so an INT8 that lost
    9.4 points of pixel agreement "lost" 0.00 mIoU points on the tune split and the search never looked for a
    mixed variant, while the final choice (rightly) measured agreement. Both now use the same metric."""
    from trtkit.search.candidates import choose_tune_metric
    from trtkit.search.tune import TuneSet, drop_points, score
    rng = np.random.RandomState(0)
    masks = rng.randint(0, 3, (4, 16, 16))
    reference = rng.randint(0, 21, (4, 16, 16))  # maps unrelated to the masks
    tune = TuneSet(np.zeros((4, 3, 16, 16), np.float32), masks, reference, "t", dense=True)
    figures = score(tune.reference, tune)
    assert tune.metric == "accuracy" and figures["accuracy"] < 0.1
    flipped = reference.copy()
    flipped[:, :4] = (flipped[:, :4] + 1) % 21  # a quarter of the pixels change class
    assert choose_tune_metric(tune, figures, 21) == "agreement"
    assert drop_points(score(flipped, tune), figures, tune.metric) == pytest.approx(25.0)
    # a trained model's tune split keeps the budget in accuracy (mIoU here)
    trained = TuneSet(np.zeros((4, 3, 16, 16), np.float32), masks, masks.copy(), "t", dense=True)
    assert choose_tune_metric(trained, score(trained.reference, trained), 3) == "accuracy"


def test_the_mixed_search_keeps_the_verification_gate_as_well_as_the_budget():
    """Measured on MediaPipe's selfie segmenter with drawn masks: INT8 "raised" the mIoU (a reference near its
    noise) while agreeing 93% per pixel, so the search sized a 2-layer mixed variant by the budget alone and
    every quantized candidate failed its 98% gate."""
    from trtkit.search.candidates import Limits
    limits = Limits(1.0, 0.98)
    assert limits.met({"drop": 0.5, "agreement": 0.99})
    assert not limits.met({"drop": -1.2, "agreement": 0.93})
    assert not limits.met({"drop": 1.5, "agreement": 0.999})
    assert Limits(1.0).met({"drop": -1.2, "agreement": 0.93})
    table = [{"layer": "a", "drop": 0.4, "agreement": 0.999}, {"layer": "b", "drop": -0.2, "agreement": 0.95},
             {"layer": "c", "drop": 0.9, "agreement": 0.998}]
    assert [r["layer"] for r in limits.rank(table)] == ["b", "c", "a"]  # b alone spends 2.5x the gate's margin
    assert [r["layer"] for r in Limits(1.0).rank(table)] == ["c", "a", "b"]


def test_a_long_sensitivity_pass_says_how_to_shorten_it(capsys):
    """A blind test: EfficientNet-B0's sensitivity pass showed an ETA of 16 minutes with nothing saying that
    --tune-images shortens it (48 images took 154 s)."""
    from trtkit.search.sensitivity import _say_if_long
    _say_if_long(12.4, 82, 256)
    err = capsys.readouterr().err
    assert "about 17 min for 82 layers on 256 tune images; --tune-images 64 would take about 4 min" in err, err
    _say_if_long(1.0, 82, 256)  # under five minutes: nothing to say
    _say_if_long(12.4, 82, 32)  # already few images
    assert capsys.readouterr().err == ""
