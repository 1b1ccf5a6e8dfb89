"""trtkit export-triton: a build's artifacts as a Triton Inference Server model repository."""

from trtkit.commands import int_list

NAME = "export-triton"
HELP = "write a Triton model repository (config.pbtxt + model.plan/model.onnx) for a build"
DESCRIPTION = """Write a Triton Inference Server model repository for a build.

For each artifact in MANIFEST (a manifest.json or its build folder) writes
REPO_DIR/<model>/config.pbtxt and REPO_DIR/<model>/1/model.plan (TensorRT
engines) or model.onnx (ONNX files, served by Triton's ONNX Runtime backend).
Input/output names, dtypes and dims come from the artifact itself; an
engine's max_batch_size comes from its optimization profile. Configs are
checked against Triton's ModelConfig schema when tritonclient is installed."""
EPILOG = """examples:
  trtkit export-triton build/engines --out model_repository
  trtkit export-triton build/engines/manifest.json --out repo --precision fp16 --name classifier
  trtkit export-triton build/engines --out repo --instance-kind cpu --instances 2   (ONNX on CPU)

then:
  docker run --gpus all --rm -p 8000:8000 -p 8001:8001 -p 8002:8002 \\
      -v $PWD/model_repository:/models nvcr.io/nvidia/tritonserver:24.10-py3 \\
      tritonserver --model-repository=/models
(see docs/deploy.md)"""


def add_arguments(parser):
    parser.add_argument("manifest", metavar="MANIFEST", help="build folder or its manifest.json")
    parser.add_argument("--out", required=True, metavar="REPO_DIR", help="model repository folder to write into")
    pick = parser.add_argument_group("what to export")
    pick.add_argument("--artifact", action="append", metavar="NAME",
                      help="artifact name from the manifest (repeatable; default: all that passed verification)")
    pick.add_argument("--precision", metavar="LIST", help="only these precisions, e.g. fp16 or fp16,int8")
    pick.add_argument("--name", metavar="MODEL", help="Triton model name (with several artifacts: MODEL_<precision>; "
                      "default: the artifact name, e.g. resnet18_fp16)")
    pick.add_argument("--include-failing", action="store_true", help="also export artifacts that failed verification")
    pick.add_argument("--force", action="store_true", help="replace models of the same name already in REPO_DIR")
    serve = parser.add_argument_group("serving")
    serve.add_argument("--max-batch-size", type=int, metavar="N",
                       help="largest batch Triton forms (default: the engine profile's max; 32 for ONNX)")
    serve.add_argument("--preferred-batch-sizes", metavar="LIST",
                       help="dynamic batcher's preferred sizes, e.g. 8,16 (default: the profile's opt and max)")
    serve.add_argument("--max-queue-delay-us", type=int, default=100, metavar="US",
                       help="how long a request may wait for a fuller batch (default: 100)")
    serve.add_argument("--no-dynamic-batching", action="store_true", help="serve each request as it comes")
    serve.add_argument("--instances", type=int, default=1, metavar="N", help="model instances per device (default: 1)")
    serve.add_argument("--instance-kind", default="auto", choices=["auto", "gpu", "cpu"],
                       help="where instances run (default auto: GPU for TensorRT engines and for ONNX the build ran "
                            "on a GPU, else CPU; cpu is for ONNX models)")
    serve.add_argument("--gpus", metavar="LIST", help="GPU ids for the instances, e.g. 0,1 (default: every GPU)")
    serve.add_argument("--json", action="store_true", help="print what was written as JSON")


def run(args):
    import json
    import os
    from trtkit import log
    from trtkit.deploy.triton import export_repository
    from trtkit.deploy.triton_config import TritonOptions
    options = TritonOptions(max_batch_size=args.max_batch_size,
                            preferred_batch_sizes=int_list(args.preferred_batch_sizes, "--preferred-batch-sizes"),
                            max_queue_delay_us=args.max_queue_delay_us, instances=args.instances,
                            instance_kind=args.instance_kind, gpus=int_list(args.gpus, "--gpus", "0,1"),
                            dynamic_batching=not args.no_dynamic_batching)
    precisions = [p.strip().lower() for p in args.precision.split(",") if p.strip()] if args.precision else None
    written = export_repository(args.manifest, args.out, artifacts=args.artifact, precisions=precisions,
                                options=options, base_name=args.name, include_failing=args.include_failing,
                                force=args.force)
    if args.json:
        print(json.dumps(written, indent=2))
        return 0
    for record in written:
        batch = "max batch {} (preferred {})".format(record["max_batch_size"], ",".join(
            str(p) for p in record["preferred_batch_sizes"]) or "-") if record["max_batch_size"] else "fixed batch"
        print("{:<28} {:<6} {}  {}".format(record["model"], record["precision"] or "-", record["file"], batch))
    log.info("model repository: {}  (serve: tritonserver --model-repository={})".format(
        os.path.abspath(args.out), os.path.abspath(args.out)))
    return 0
