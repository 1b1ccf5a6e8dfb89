"""trtkit predict: classify, segment or detect in image files with a build's artifact, its preprocessing and class
names."""

NAME = "predict"
HELP = "classify, segment or detect in image files with a built artifact (the build's preprocessing, class names)"
DESCRIPTION = """Classify images with a build's artifact; segment them with a segmentation build's, find objects
in them with a detection build's.

PATH is a build folder, its manifest.json, or one artifact (.onnx; .engine with
its .json sidecar). From a build the artifact is --precision's, else the
manifest's chosen one, else the fastest that passed verification. Images are
preprocessed with the build's input contract (size, resize, mean/std) exactly
as verification did, and decoded a batch at a time: any number of files works.
Folders expand to their image files (recursively, sorted).

A segmentation build predicts a class per pixel, taken back onto each image at
its own size (undoing the build's resize, crop or padding; pixels a centre crop
cut off are 255, "unseen"). Each image gets one line: its top classes by share
of pixels. --out DIR also writes, per image, NAME.mask.png (the class indices
as a palette PNG, Pascal VOC's colours) and NAME.overlay.png (the image with
the class colours blended in; class 0, the background, left as is), NAME
being the image's path below the folder all images share, without extension.

A detection build prints each image's detections scoring at least
--score-threshold (default 0.3): class name, score and box (x1 y1 x2 y2 in the
image's own pixels, the build's resize, crop or padding undone). The head's
post-processing is the build's (its manifest); --iou-threshold,
--max-detections and --class-agnostic change it. --out DIR also writes, per
image, NAME.boxes.png (the image with labelled boxes, a colour per class) and,
for the run, DIR/detections.json (COCO results: image_id = the image's position
in the file list from 1, category_id = the model's class index, bbox = [x, y,
w, h]) and DIR/images.json (those ids' files and sizes, the class names)."""
EPILOG = """examples:
  trtkit predict build/engines photo.jpg
  trtkit predict build/engines photos/ --top-k 3 --precision fp16
  trtkit predict build/engines/resnet18.fp16.onnx photos/ --json > predictions.json

  trtkit predict build/seg photos/ --out masks/ --json > shares.json
  trtkit predict build/det photos/ --out drawn/ --score-threshold 0.5

--json prints a list of {"image": PATH, "top_k": [{"class": I, "name": S, "probability": P}, ...]};
for a segmentation build {"image": PATH, "width": W, "height": H, "coverage": share of the pixels seen,
"fractions": [share of each class among the seen pixels, summing to 1], "top": [{"class": I, "name": S,
"fraction": F}, ...], "mask": FILE, "overlay": FILE} (the files with --out); for a detection build
{"image": PATH, "width": W, "height": H, "detections": [{"class": I, "name": S, "score": P, "box": [x1, y1, x2,
y2]}, ...], "drawn": FILE}."""

PROGRESS_FROM = 100  # files from which a progress bar is drawn (when stdout is not a terminal)


def add_arguments(parser):
    parser.add_argument("model", metavar="PATH", help="build folder, its manifest.json, or one artifact")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_FOLDER", help="image files and folders of images")
    parser.add_argument("--top-k", type=int, default=5, metavar="K",
                        help="classes per image (default: 5); segmentation: the classes covering most pixels; "
                             "detection: not used (see --score-threshold and --max-detections)")
    parser.add_argument("--precision", metavar="P", help="the build's artifact of this precision, e.g. fp16")
    parser.add_argument("--backend", metavar="NAME", help="the build's artifact for this runtime (a build has one)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="B",
                        help="images per run, kept inside the engine's batch range (default: 32)")
    parser.add_argument("--json", action="store_true", help="print the predictions as JSON")
    parser.add_argument("--out", metavar="DIR",
                        help="segmentation builds: write each image's mask and overlay PNGs into DIR; detection "
                             "builds: each image with its boxes drawn, and the COCO results JSON")
    from trtkit.app.detector import DetectionOptions
    DetectionOptions.add_arguments(parser)


def run(args):
    import sys
    from trtkit import log, tasks
    from trtkit.app.loader import load
    from trtkit.app.inputs import image_files
    from trtkit.errors import InputError
    if args.top_k < 1:
        raise InputError("--top-k must be at least 1, got {}".format(args.top_k))
    if args.batch_size < 1:
        raise InputError("--batch-size must be at least 1, got {}".format(args.batch_size))
    from trtkit.app.detector import DetectionOptions
    DetectionOptions.from_args(args)  # a detection flag's bad value is refused before anything loads
    files, ignored = image_files(args.images)
    if ignored:
        log.info("left out {} non-image file(s) found in the folders".format(ignored))
    with load(args.model, precision=args.precision, backend=args.backend, batch_size=args.batch_size) as model:
        log.info("{} image(s) with {} ({}, {}; input {})".format(
            len(files), model.name, model.backend, model.precision or "-",
            "x".join(str(d) for d in model.contract.shape)))
        task = tasks.of(model.task)
        if args.out and not task.draws:
            raise InputError("--out writes the masks of a segmentation build or the boxes of a detection build; {} "
                             "is a classifier".format(model.name), hint="drop --out")
        skipped = _Skipped()
        writer = JsonWriter(sys.stdout) if args.json else TableWriter(sys.stdout, files, args.top_k, model.class_names)
        show = len(files) >= PROGRESS_FROM and not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty())
        with log.Progress("{} {} images".format(task.predict_verb, len(files)),
                          total=len(files), unit="img") if show else _Nothing() as bar:
            task.predict_files(model, files, args, writer, bar, skipped)  # classify_files, ..., detect_files
        writer.close()
    if skipped.errors:
        first = skipped.errors[0]
        if len(files) == 1:
            raise first
        raise InputError("{} of {} images could not be read and have no prediction ({}{}); the others were "
                         "predicted".format(len(skipped.errors), len(files), first.message,
                                            ", and the others named above" if len(skipped.errors) > 1 else ""),
                         hint="remove or replace those files")
    return 0


class _Skipped(object):
    """Files ``predict`` could not read: each said in a warning as it comes, the run goes on with the others
    (one corrupt file among thousands must not cost the rest their predictions), and the exit code says so."""

    def __init__(self):
        self.errors = []

    def __call__(self, path, error):
        from trtkit import log
        self.errors.append(error)
        log.warn("skipped: {}".format(error.message))


def classify_files(model, files, args, writer, bar, skipped):
    """Each file's top classes (``writer``)."""
    for label, top in model.iter_predict(files, args.top_k, on_unreadable=skipped):
        writer.write(label, top)
        if bar is not None:
            bar.update()


def segment_files(model, files, args, writer, bar, skipped):
    """Masks of ``files``: a summary each (``writer``), and the mask and overlay files with ``--out``."""
    from trtkit import log
    from trtkit.app.mask_files import MaskWriter, record
    from trtkit.fileio import output_dir
    if not args.json:
        log.info("each image's classes covering most of its pixels (share of the pixels the model saw)")
    with output_dir(args.out) if args.out else _Nothing() as out:
        files_writer = MaskWriter(out, files, model.contract) if out else None
        for label, mask in model.iter_predict(files, on_unreadable=skipped):
            summary = record(label, mask, model, args.top_k)
            if files_writer is not None:
                summary["mask"], summary["overlay"] = files_writer.write(label, mask)
            if args.json:
                writer.write_record(summary)
            else:
                writer.write(label, [(t["class"], t["name"], t["fraction"]) for t in summary["top"]])
            if bar is not None:
                bar.update()
    if args.out:
        log.info("wrote {} mask(s) and overlay(s) to {}".format(len(files) - len(skipped.errors),
                                                                 args.out))


class _Nothing(object):
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class JsonWriter(object):
    """A JSON list written an image at a time (memory does not grow with the number of images)."""

    def __init__(self, stream):
        self.stream = stream
        self.count = 0

    def write(self, label, top):
        self.write_record({"image": label,
                           "top_k": [{"class": c, "name": n, "probability": round(p, 6)} for c, n, p in top]})

    def write_record(self, record):
        import json
        self.stream.write(("[\n  " if self.count == 0 else ",\n  ") + json.dumps(record))
        self.count += 1

    def close(self):
        self.stream.write("[]\n" if self.count == 0 else "\n]\n")
        self.stream.flush()


class TableWriter(object):
    """One line per image: its path, then the top-k classes as 'index name (probability)', best first."""

    def __init__(self, stream, files, top_k, class_names=None):
        self.stream = stream
        self.width = max([len("image")] + [len(f) for f in files])
        names = class_names or []
        self.cell = max([len("top-{}".format(top_k))] + [len(_class(i, n)) + 10 for i, n in enumerate(names)] + [14])
        self.top_k = top_k
        self.header = False

    def write(self, label, top):
        if not self.header:
            columns = ["top-{}".format(i + 1).ljust(self.cell) for i in range(min(self.top_k, max(len(top), 1)))]
            self.stream.write("{}  {}\n".format("image".ljust(self.width), "  ".join(columns).rstrip()))
            self.header = True
        cells = ["{} ({:.2%})".format(_class(c, n), p).ljust(self.cell) for c, n, p in top]
        self.stream.write("{}  {}\n".format(label.ljust(self.width), "  ".join(cells).rstrip()))
        self.stream.flush()

    def close(self):
        self.stream.flush()


def _class(index, name):
    """'7' for class 7 named '7' (or unnamed), '281 tabby' otherwise."""
    return str(index) if name is None or name == str(index) else "{} {}".format(index, name)
