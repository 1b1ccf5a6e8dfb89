"""trtkit serve: a build's artifacts on a Triton Inference Server (PyTriton), with trtkit's runners."""

NAME = "serve"
HELP = "serve a build on a Triton Inference Server (HTTP/gRPC, dynamic batching) through PyTriton"
DESCRIPTION = """Serve a build's artifacts on a real Triton Inference Server.

PATH is a build folder, its manifest.json, or one artifact. Each artifact that
passed verification (or each of --precision) is served by trtkit's own runner
(ONNX Runtime on the CPU, TensorRT on a GPU) as two Triton models:

  <name>_<precision>         input "input" FP32 [-1,C,H,W] (preprocessed) -> "logits" FP32 [-1,K]
                             (Triton's dynamic batching)
  <name>_<precision>_images  input "images" BYTES [-1,1] (encoded JPEG/PNG, preprocessed on the
                             server with the build's contract) -> "logits", "top_classes" INT64
                             [-1,k], "top_probabilities" FP32 [-1,k], "top_names" BYTES [-1,k]

A segmentation build's models answer per pixel instead:

  <name>_<precision>         "input" -> "logits" FP32 [-1,C,h,w] (the score maps)
  <name>_<precision>_images  "images" -> "mask" BYTES [-1,1]: base64 text of a PNG (palette mode P)
                             whose pixels are the class indices at the image's own size (255:
                             cut off by a centre crop, unseen), and "fractions" FP32 [-1,K]: each
                             class's share of the seen pixels (summing to 1). Decode a mask with
                             numpy.asarray(PIL.Image.open(io.BytesIO(base64.b64decode(text))))

A detection build's:

  <name>_<precision>         "input" -> "logits" FP32 [-1,A,4+C] (the decoded boxes and scores)
  <name>_<precision>_images  "images" -> per image every detection the build's head keeps, best
                             first, in the image's own pixels: "boxes" FP32 [-1,K,4] (x1 y1 x2 y2),
                             "scores" FP32 [-1,K], "classes" INT64 [-1,K], "names" BYTES [-1,K],
                             "count" INT64 [-1,1]; K is the head's detections per image, rows from
                             count on are padding (class -1, score 0). Filter by score yourself
                             (trtkit predict shows 0.3 and above)

Needs the serve extra: pip install 'trtkit[serve]' (PyTriton ships tritonserver;
Python 3.8+). SIGINT or SIGTERM stops the server cleanly."""
EPILOG = """examples:
  trtkit serve build/engines                                   every passing artifact, localhost:8000/8001
  trtkit serve build/engines --precision fp16 --max-batch 64 --address 0.0.0.0
  curl -s localhost:8000/v2/health/ready -o /dev/null -w "%{http_code}\\n"
(a tritonclient example: docs/deploy.md)"""


def add_arguments(parser):
    from trtkit.app.serve import ServeOptions
    parser.add_argument("model", metavar="PATH", help="build folder, its manifest.json, or one artifact")
    ServeOptions.add_arguments(parser)


def run(args):
    from trtkit.app.serve import ServeOptions, serve
    serve(args.model, ServeOptions.from_args(args))
    return 0
