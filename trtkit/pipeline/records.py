"""The build's records as types: ``Manifest``, ``ArtifactRecord``, ``Verification``, ``Selection``.

Each record declares its fields once (``FIELDS``), so the keys an artifact
record has are written down here instead of guessed by each reader; each has
``to_json``/``from_json``, and only this module turns them into JSON and back
(``pipeline.manifest`` reads and writes the file). Keys a record does not
declare (written by a newer trtkit, or added by a step) are kept and written
back unchanged. The JSON keys are the manifest's keys since version 1, so
readers of ``manifest.json`` see the same document; the build folder is never
a key of a record (``pipeline.manifest.open_build`` pairs them).

Records read like the dicts they replace (``record["verify"]["top1_agreement"]``,
``record.get("status")``), so scripts written against the JSON keep working;
new code uses attributes (``record.verify.top1_agreement``).
"""

SCHEMA_VERSION = 2  # 1: manifests before typed records (no schema_version key); 2: typed records


class Record(object):
    """A record with declared ``FIELDS`` ((name, default) pairs) and the undeclared keys it was given."""

    FIELDS = ()
    NESTED = {}  # field name -> Record class (or a list of it: ``[ArtifactRecord]``)

    def __init__(self, **values):
        self._given = set(name for name, _ in self.FIELDS if name in values)  # written back even when None
        for name, default in self.FIELDS:
            setattr(self, name, values.pop(name, default))
        self.extra = values

    # ---------------------------------------------------------------- JSON
    def to_json(self):
        """A JSON-ready dict: declared fields that are set (nested records converted), then the extra keys."""
        data = {}
        for name, _ in self.FIELDS:
            value = getattr(self, name)
            if value is not None or name in self._given:
                data[name] = _to_json(value)
        for key, value in self.extra.items():
            data.setdefault(key, _to_json(value))
        return data

    @classmethod
    def from_json(cls, data):
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError("{} must be a JSON object, not {}".format(cls.__name__, type(data).__name__))
        values = dict(data)
        for name, kind in cls.NESTED.items():
            value = values.get(name)
            if value is None:
                continue
            if isinstance(kind, list):
                values[name] = [kind[0].from_json(v) for v in value]
            else:
                values[name] = kind.from_json(value)
        return cls(**values)

    # ---------------------------------------------------------------- the dict view
    def _names(self):
        return [name for name, _ in self.FIELDS]

    def __getitem__(self, key):
        if key in self._names():
            value = getattr(self, key)
            if value is None and key not in self._given:
                raise KeyError(key)
            return value
        return self.extra[key]

    def __setitem__(self, key, value):
        if key in self._names():
            kind = self.NESTED.get(key)
            if kind is not None and value is not None:
                value = [kind[0].from_json(v) for v in value] if isinstance(kind, list) else kind.from_json(value)
            setattr(self, key, value)
            self._given.add(key)
        else:
            self.extra[key] = value

    def __contains__(self, key):
        try:
            self[key]
            return True
        except KeyError:
            return False

    def get(self, key, default=None):
        try:
            return self[key]
        except KeyError:
            return default

    def update(self, other=None, **values):
        for key, value in dict(other or {}, **values).items():
            self[key] = value

    def keys(self):
        return self.to_json().keys()

    def items(self):
        return [(key, self[key]) for key in self.keys()]

    def pop(self, key, *default):
        if key in self:
            value = self[key]
            if key in self._names():
                setattr(self, key, None)
                self._given.discard(key)
            else:
                del self.extra[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def __eq__(self, other):
        """Equal to a record of its type, or to the JSON document (a dict) it writes."""
        if isinstance(other, dict):
            return self.to_json() == other
        return isinstance(other, Record) and type(other) is type(self) and other.to_json() == self.to_json()

    def __ne__(self, other):
        return not self == other

    __hash__ = None

    def __repr__(self):
        return "{}({})".format(type(self).__name__, ", ".join(
            "{}={!r}".format(k, v) for k, v in sorted(self.to_json().items())[:6]))


def _to_json(value):
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return dict((k, _to_json(v)) for k, v in value.items())
    return value


class Verification(Record):
    """How a variant compared with FP32 on held-out images (``pipeline.verify.Comparison``): ``decision`` is
    the output kind whose rule made the decisions; ``top1_agreement`` their agreement (None: nothing was
    compared); ``accuracy``/``reference_accuracy`` against labels (None without labels that fit);
    ``intervals``: each figure's 95% interval as [low, high] (``top1_agreement``, ``accuracy``,
    ``reference_accuracy``, ``accuracy_drop`` and ``agreement_drop`` as fractions lost against FP32; a
    segmentation map's ``pixel_agreement``, ``miou_vs_reference``, ``miou``, ``miou_drop``), with
    ``confidence`` and ``method``; ``counts``: what a classifier's figures were counted from; ``is_reference``:
    True when this artifact's outputs were the reference itself (an ONNX source's FP32 file on ONNX Runtime's
    CPU provider: ``verification._reference_twin``)."""
    FIELDS = (("images", 0), ("decision", None), ("top1_agreement", None), ("accuracy", None),
              ("reference_accuracy", None), ("max_abs_diff", None), ("mean_abs_diff", None),
              ("label_agreement", None), ("unreadable_images", None), ("intervals", None), ("counts", None),
              ("is_reference", None))


class ArtifactRecord(Record):
    """One built artifact: ``name`` (``NAME.<label>``), ``precision``, ``backend``, ``path`` and ``onnx``
    (file names in the build folder), ``bytes``, ``build_seconds``; after verification ``verify``
    (a Verification), ``status`` (ok, failing, built), ``status_detail``, ``significant`` (False: passes on
    the measured figures, not on their 95% lower bounds), ``min_agreement``, ``max_accuracy_drop`` (a QAT
    variant verified with labels: judged by accuracy, ``gate.fine_tuned_judged_by_accuracy``), ``ran_on``,
    ``throughput_batch``, ``throughput_ips`` (median of ``throughput_rounds``, interleaved with the other
    artifacts); what made it: ``calibration``, ``int8_encoding``, ``isa``,
    ``kept_fp32_ops``, ``kept_layers``, ``kept_in``, ``mixed_from``, ``tune``, ``backend_info``."""
    FIELDS = (("name", None), ("precision", None), ("backend", None), ("path", None), ("onnx", None),
              ("bytes", None), ("build_seconds", None), ("verify", None), ("status", None),
              ("status_detail", None), ("significant", None), ("min_agreement", None), ("max_accuracy_drop", None),
              ("ran_on", None), ("throughput_batch", None), ("throughput_ips", None), ("throughput_rounds", None),
              ("calibration", None), ("int8_encoding", None), ("isa", None),
              ("kept_fp32_ops", None), ("kept_layers", None), ("kept_in", None), ("mixed_from", None),
              ("tune", None), ("backend_info", None))
    NESTED = {"verify": Verification}

    @property
    def label(self):
        """The part of the name after the model's: ``fp16``, ``int8-entropy``, ``mixed-k3``."""
        return self.name.split(".", 1)[-1] if self.name else None


class Selection(Record):
    """The ``--precision auto`` choice: ``chosen`` (an artifact name), ``max_drop``, ``metric`` (accuracy or
    agreement), ``candidates`` (one row each: drop, within_budget, passes_gate, throughput) and ``notes``."""
    FIELDS = (("chosen", None), ("max_drop", None), ("metric", None), ("candidates", None), ("notes", None))


class Manifest(Record):
    """The single record of a build (``DIR/manifest.json``): ``model`` (name, source, input contract, output
    kind, class count...), ``export``, ``data``, ``options``, ``backend``, ``artifacts`` (ArtifactRecords),
    ``verification`` (the pass's images, seconds, rate), ``selection`` (a Selection, auto builds),
    ``search``, ``build_seconds`` and ``files`` (every file of the build)."""
    FIELDS = (("schema_version", None), ("manifest_version", None), ("trtkit_version", None),
              ("created", None), ("model", None), ("export", None), ("data", None), ("options", None),
              ("backend", None), ("artifacts", None), ("verification", None), ("selection", None),
              ("search", None), ("build_seconds", None), ("files", None))
    NESTED = {"artifacts": [ArtifactRecord], "selection": Selection}

    def __init__(self, **values):
        super(Manifest, self).__init__(**values)
        if self.artifacts is None:
            self.artifacts = []

    def artifact(self, name):
        """The ArtifactRecord called ``name`` (``resnet18.fp16``), or None."""
        for artifact in self.artifacts:
            if artifact.name == name:
                return artifact
        return None

    @property
    def output_kind(self):
        """The model's output kind name (``trtkit.outputs``): logits for manifests that predate it."""
        return (self.model or {}).get("output_kind", "logits")

    @property
    def task(self):
        """What the model does, as the manifest names it (``trtkit.tasks``): ``classification`` (also for manifests
        that predate the task) or ``segmentation``."""
        from trtkit import tasks
        return tasks.of((self.model or {}).get("task")).name
