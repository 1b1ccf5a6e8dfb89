"""trtkit predict: classify image files with a build's artifact, its preprocessing and its class names."""

NAME = "predict"
HELP = "classify image files with a built artifact (the build's preprocessing and class names)"
DESCRIPTION = """Classify images with a build's artifact.

PATH is a build folder, its manifest.json, or one artifact (.onnx; .engine with
its .json sidecar). From a build the artifact is --precision's, else the
manifest's chosen one, else the fastest that passed verification. Images are
preprocessed with the build's input contract (size, resize, mean/std) exactly
as verification did, and decoded a batch at a time: any number of files works.
Folders expand to their image files (recursively, sorted)."""
EPILOG = """examples:
  trtkit predict build/engines photo.jpg
  trtkit predict build/engines photos/ --top-k 3 --precision fp16
  trtkit predict build/engines/resnet18.fp16.onnx photos/ --json > predictions.json

--json prints a list of {"image": PATH, "top_k": [{"class": I, "name": S, "probability": P}, ...]}."""

PROGRESS_FROM = 100  # files from which a progress bar is drawn (when stdout is not a terminal)


def add_arguments(parser):
    parser.add_argument("model", metavar="PATH", help="build folder, its manifest.json, or one artifact")
    parser.add_argument("images", nargs="+", metavar="IMAGE_OR_FOLDER", help="image files and folders of images")
    parser.add_argument("--top-k", type=int, default=5, metavar="K", help="classes per image (default: 5)")
    parser.add_argument("--precision", metavar="P", help="the build's artifact of this precision, e.g. fp16")
    parser.add_argument("--backend", metavar="NAME", help="the build's artifact for this runtime (a build has one)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="B",
                        help="images per run, kept inside the engine's batch range (default: 32)")
    parser.add_argument("--json", action="store_true", help="print the predictions as JSON")


def run(args):
    import sys
    from trtkit import log
    from trtkit.app.classifier import load
    from trtkit.app.inputs import image_files
    from trtkit.errors import InputError
    if args.top_k < 1:
        raise InputError("--top-k must be at least 1, got {}".format(args.top_k))
    if args.batch_size < 1:
        raise InputError("--batch-size must be at least 1, got {}".format(args.batch_size))
    files, ignored = image_files(args.images)
    if ignored:
        log.info("left out {} non-image file(s) found in the folders".format(ignored))
    with load(args.model, precision=args.precision, backend=args.backend, batch_size=args.batch_size) as model:
        log.info("{} image(s) with {} ({}, {}; input {})".format(
            len(files), model.name, model.backend, model.precision or "-",
            "x".join(str(d) for d in model.contract.shape)))
        writer = JsonWriter(sys.stdout) if args.json else TableWriter(sys.stdout, files, args.top_k, model.class_names)
        show = len(files) >= PROGRESS_FROM and not (hasattr(sys.stdout, "isatty") and sys.stdout.isatty())
        with log.Progress("classifying {} images".format(len(files)), total=len(files), unit="img") if show \
                else _Nothing() as bar:
            for label, top in model.iter_predict(files, args.top_k):
                writer.write(label, top)
                if bar is not None:
                    bar.update()
        writer.close()
    return 0


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
        import json
        record = {"image": label, "top_k": [{"class": c, "name": n, "probability": round(p, 6)} for c, n, p in top]}
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
