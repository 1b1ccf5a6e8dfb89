"""Tasks have one owner (``trtkit.tasks``): no task name is compared as a string anywhere else, and each Task
answers what its callers ask of it.

The source walk reads every module's AST (nothing imported): a comparison (``==``, ``!=``, ``in``, ``not in``,
``is``) with a task name or alias as a literal operand, or a literal tuple, list or set holding one, outside
``trtkit/tasks/`` fails with the file and line. Writing a task's name (a manifest's ``"task"`` value, a
keyword argument) is not a comparison and stays allowed.
"""

import ast
import os

import numpy as np
import pytest

from trtkit import tasks
from trtkit.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WALKED = ("trtkit", "scripts")
OWNER = os.path.join("trtkit", "tasks")


def task_words():
    """Every name and alias of a registered task."""
    return set(word for task in tasks.TASKS.values() for word in (task.name,) + tuple(task.aliases))


def _literals(node):
    """The string literals ``node`` is (a str constant) or holds (a literal tuple, list or set of them)."""
    if isinstance(node, ast.Constant if hasattr(ast, "Constant") else ast.Str):
        value = getattr(node, "value", getattr(node, "s", None))
        return [value] if isinstance(value, str) else []
    if isinstance(node, getattr(ast, "Str", ())):  # Python < 3.8
        return [node.s]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for element in node.elts for v in _literals(element)]
    return []


def name_comparisons(source, path="<source>", words=None):
    """(path, line, text) of each comparison in ``source`` with a task name literal as an operand."""
    words = task_words() if words is None else words
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left] + list(node.comparators)
        if any(word in words for operand in operands for word in _literals(operand)):
            text = source.splitlines()[node.lineno - 1].strip()
            found.append((path, node.lineno, text))
    return found


def python_files(root=ROOT):
    for top in WALKED:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
            rel = os.path.relpath(folder, root)
            if rel == OWNER or rel.startswith(OWNER + os.sep):
                continue
            for name in sorted(files):
                if name.endswith(".py"):
                    yield os.path.join(folder, name)


def test_no_task_name_is_compared_outside_the_tasks_package():
    found = []
    for path in python_files():
        with open(path) as handle:
            found += name_comparisons(handle.read(), os.path.relpath(path, ROOT))
    assert not found, "ask the Task (trtkit.tasks) instead of comparing its name:\n" + "\n".join(
        "{}:{}: {}".format(*f) for f in found)


def test_the_walk_catches_the_comparisons_the_code_had():
    source = "\n".join([
        'if task != "segmentation":',                                   # deploy/triton.py, gate.py
        '    pass',
        'segment = model.task == "segmentation"',                       # commands/predict.py
        'dense = manifest.get("model", {}).get("task") == "segmentation"',  # pipeline/table.py
        'ok = task in ("classification", "segmentation")',             # a membership test of literals
        'back = "classification" == asked',                            # the literal on the left
        'alias = name not in ["seg"]',                                  # an alias counts too
        'fine = {"task": "segmentation"}',                              # writing a name is no comparison
        'also = f(task="segmentation")',
        'other = step == "torch-compile"',
    ])
    lines = [line for _, line, _ in name_comparisons(source)]
    assert lines == [1, 3, 4, 5, 6, 7]


def test_the_walk_sees_every_module_and_skips_only_the_owner():
    walked = [os.path.relpath(p, ROOT) for p in python_files()]
    assert os.path.join("trtkit", "pipeline", "gate.py") in walked
    assert any(p.startswith("scripts" + os.sep) for p in walked)
    assert not any(p.startswith(OWNER) for p in walked)


# ---------------------------------------------------------------- the registry

def test_parse_names_aliases_and_tasks():
    assert tasks.parse("classification") is tasks.CLASSIFICATION
    assert tasks.parse("segmentation") is tasks.SEGMENTATION
    assert tasks.parse(" Segment ") is tasks.SEGMENTATION
    assert tasks.parse("semantic_segmentation") is tasks.SEGMENTATION
    assert tasks.parse("classify") is tasks.CLASSIFICATION
    assert tasks.parse(tasks.SEGMENTATION) is tasks.SEGMENTATION
    assert tasks.parse("object-detection") is tasks.parse("detect") is tasks.DETECTION
    assert tasks.names() == ("classification", "segmentation", "detection")
    assert sorted(tasks.TASKS) == sorted(tasks.names())
    assert all(tasks.TASKS[name].name == name for name in tasks.names())


def test_unknown_task_names_the_nearest():
    with pytest.raises(InputError) as info:
        tasks.parse("segmentaton")
    assert "unknown task 'segmentaton'" in str(info.value) and "did you mean segmentation?" in str(info.value)
    with pytest.raises(InputError) as info:
        tasks.parse("panoptic-things-nowhere")
    assert "use one of classification, segmentation, detection" in str(info.value)


def test_recorded_names_and_old_manifests():
    assert tasks.of(None) is tasks.DEFAULT is tasks.CLASSIFICATION  # manifests before the task
    assert tasks.of("") is tasks.CLASSIFICATION
    assert tasks.of("segmentation") is tasks.SEGMENTATION
    from trtkit.pipeline.records import Manifest
    assert Manifest.from_json({"model": {"name": "m"}, "artifacts": []}).task == "classification"
    assert Manifest.from_json({"model": {"task": "segmentation"}, "artifacts": []}).task == "segmentation"


def test_tasks_compare_by_name():
    assert tasks.parse("seg") == tasks.SEGMENTATION and tasks.CLASSIFICATION != tasks.SEGMENTATION
    assert len(set([tasks.parse("seg"), tasks.SEGMENTATION, tasks.CLASSIFICATION])) == 2
    assert repr(tasks.SEGMENTATION) == "Task(segmentation)"


@pytest.mark.parametrize("dims, name", [
    ([None, 10], "classification"), ([1, 10, 1, 1], "classification"), ([None, 21, None, None], "segmentation"),
    ([1, 1, 64, 64], "segmentation"), ([1, 4, 8], None), ([1], None), ([], None)])
def test_of_shape_recognises_each_task(dims, name):
    task = tasks.of_shape(dims)
    assert (task.name if task else None) == name


def test_of_model_name():
    assert tasks.of_model_name("fcn_resnet50") is tasks.SEGMENTATION
    assert tasks.of_model_name(tasks.SEGMENTATION.sample_name) is tasks.SEGMENTATION
    assert tasks.of_model_name("resnet18") is None and tasks.of_model_name(None) is None


# ---------------------------------------------------------------- what callers ask of each task

def test_every_named_part_resolves():
    """The ``module:attribute`` paths a Task holds name what its callers run."""
    from trtkit.app.classifier import Classifier
    from trtkit.app.segmenter import Segmenter
    from trtkit.commands.predict import classify_files, segment_files
    from trtkit.models.sample import sample_model, sample_segmentation_model
    from trtkit.models.segmentation import is_segmentation_name
    from trtkit.pipeline.dense import DenseComparison
    from trtkit.pipeline.verify import Comparison
    c, s = tasks.CLASSIFICATION, tasks.SEGMENTATION
    assert c.app_class() is Classifier and s.app_class() is Segmenter
    assert Classifier.task == c.name and Segmenter.task == s.name  # what trtkit.load's models say
    assert tasks.resolve(c.predict) is classify_files and tasks.resolve(s.predict) is segment_files
    assert tasks.resolve(c.sample) is sample_model and tasks.resolve(s.sample) is sample_segmentation_model
    assert c.architectures is None and tasks.resolve(s.architectures) is is_segmentation_name
    assert isinstance(c.comparison_for("logits"), Comparison)
    assert isinstance(s.comparison_for("binary-logit"), DenseComparison)


def test_sample_names_are_the_models():
    from trtkit.models.sample import SAMPLE_ARCH, SEGMENTATION_ARCH
    from trtkit.models.segmentation import SEGMENTATION_SAMPLE
    from trtkit.data.sources import SHAPES
    assert tasks.CLASSIFICATION.sample_name == SAMPLE_ARCH == "resnet18"
    assert tasks.SEGMENTATION.sample_name == SEGMENTATION_ARCH == SEGMENTATION_SAMPLE
    assert tasks.SEGMENTATION.sample_data == SHAPES and tasks.CLASSIFICATION.sample_data == "sample"


def test_reading_outputs():
    c, s = tasks.CLASSIFICATION, tasks.SEGMENTATION
    assert (c.class_axis, s.class_axis) == (-1, 1)
    assert c.multilabel and not s.multilabel  # sigmoids per channel of a map are not read
    assert c.flat and not s.flat
    assert not c.dense and s.dense
    assert "[N, C, H, W]" in s.output_text and "[N, classes]" in c.output_text


def test_gates_and_metrics():
    from trtkit.outputs import BINARY_LOGIT, LOGITS
    from trtkit.pipeline import dense
    from trtkit.pipeline.gate import miou_threshold, threshold
    c, s = tasks.CLASSIFICATION, tasks.SEGMENTATION
    assert s.min_agreement is dense.MIN_PIXEL_AGREEMENT and s.miou_gates is dense.MIN_MIOU_VS_REFERENCE
    assert s.max_miou_drop == dense.MAX_MIOU_DROP and c.max_miou_drop is None
    assert c.min_agreement == {} and c.miou_gates == {}

    class Options(object):
        min_agreement = {"fp32": 0.999, "fp16": 0.99, "int8": 0.95, "mixed": 0.95}
        min_agreement_given = ()
    assert threshold(Options(), "classification", "fp16") == 0.99
    assert threshold(Options(), s, "fp16") == dense.MIN_PIXEL_AGREEMENT["fp16"]
    assert threshold(Options(), "segmentation", "fp32") == 0.999  # no pixel gate of its own: the option's
    assert miou_threshold(Options(), s, "int8") == dense.MIN_MIOU_VS_REFERENCE["int8"]
    assert miou_threshold(Options(), c, "int8") is None
    assert c.agreement_name(LOGITS) == "top-1" and c.agreement_name(BINARY_LOGIT) == "decision"
    assert s.agreement_name(LOGITS) == "pixel"
    assert c.metric_label("accuracy") == "top-1 accuracy" and s.metric_label("accuracy") == "mIoU"
    assert s.metric_label("agreement") == "agreement (pixels, mIoU vs FP32)"
    assert c.metric_label("other") == "other"
    assert [f for _, f in c.agreement_columns] == ["top1_agreement"]
    assert [f for _, f in s.agreement_columns] == ["pixel_agreement", "miou_vs_reference"]
    assert (c.accuracy_name, s.accuracy_name) == ("accuracy", "mIoU")


def test_labels():
    c, s = tasks.CLASSIFICATION, tasks.SEGMENTATION
    per_image, masks = np.zeros(4, dtype=np.int64), np.zeros((4, 8, 8), dtype=np.int64)
    assert c.labels_of(per_image) is per_image
    assert s.labels_of(per_image) is None and s.labels_of(masks) is masks and s.labels_of(None) is None

    class Selection(object):
        def __init__(self, labels=None, masks=None, class_names=None):
            self.labels, self.annotations, self.class_names = labels, masks, class_names
            self.holds = "masks" if masks is not None else "classes" if labels is not None else None
    assert c.usable_labels(Selection(per_image, class_names=list("ab")), 2, "d")
    assert not c.usable_labels(Selection(per_image, class_names=list("abc")), 2, "d")  # another class count
    assert not c.usable_labels(Selection(), 2, "d")
    assert s.usable_labels(Selection(masks=["m"]), 2, "d") and not s.usable_labels(Selection(per_image), 2, "d")
    assert (c.labels, s.labels) == ("classes", "masks")
    d = tasks.DETECTION
    boxes = Selection()
    boxes.holds = "boxes"
    assert d.usable_labels(boxes, 2, "d") and not d.usable_labels(Selection(masks=["m"]), 2, "d")
    assert not s.usable_labels(boxes, 2, "d") and not c.usable_labels(boxes, 2, "d")
    assert d.labels_of([1]) == [1] and d.labels_of(per_image) is None and d.labels == "boxes"


def test_predict_and_serve():
    c, s = tasks.CLASSIFICATION, tasks.SEGMENTATION
    assert c.draws is None and s.draws == "masks"
    assert (c.predict_verb, s.predict_verb) == ("classifying", "segmenting")

    class Tensor(object):
        def __init__(self, name, dtype, shape):
            self.name, self.shape = name, shape

    class Model(object):
        num_classes = 3
        output_columns = 3

        class kind(object):
            multilabel = False
    logits_out = Tensor("logits", np.float32, (3,))
    assert [t.name for t in c.serve_outputs(Tensor, Model, 2, logits_out)] == [
        "logits", "top_classes", "top_probabilities", "top_names"]
    assert [t.name for t in s.serve_outputs(Tensor, Model, 2, logits_out)] == ["mask", "fractions"]


def test_triton_note():
    class Output(object):
        name, dims = "out", [-1, 3, 8, 8]

    class IO(object):
        outputs = [Output()]
    assert tasks.CLASSIFICATION.triton_note(IO(), "m") == ""
    assert "segmentation: 'out' holds [C, H, W] scores" in tasks.SEGMENTATION.triton_note(IO(), "m")
    Output.dims = [-1, 3]
    with pytest.raises(InputError, match="not \\[N, C, H, W\\]"):
        tasks.SEGMENTATION.triton_note(IO(), "m")


def test_task_option_keeps_its_values_and_takes_aliases():
    from trtkit.pipeline.source import ModelOptions
    field = [f for f in ModelOptions.FIELDS if f.keyword == "task"][0]
    assert list(field.flag["choices"]) == ["classification", "segmentation", "detection"]
    assert ModelOptions(task="seg").task == "segmentation"  # stored as the task's name, as manifests keep it
    with pytest.raises(InputError, match="unknown task"):
        ModelOptions(task="detect-all")
