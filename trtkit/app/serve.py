"""``trtkit serve``: a build's artifacts on a real Triton Inference Server, through PyTriton.

PyTriton (``pip install 'trtkit[serve]'``, Python 3.8+) ships the
``tritonserver`` binary with its Python backend and starts it as a child
process; each model's requests come back into this process, where trtkit's own
runners run them (ONNX Runtime on the CPU, TensorRT on a GPU), so what is
served is exactly what the build verified. Triton does the HTTP/gRPC
protocol, the request checks (shape, dtype), the dynamic batching, health
(``/v2/health/ready``) and metrics. The models and their inputs and outputs:
``triton_models``.

``serve(path, options)`` blocks until SIGINT or SIGTERM (or ``stop`` is set),
then stops Triton and unloads the runners.
"""

import os
import signal
import sys
import threading

from trtkit import log
from trtkit.errors import InputError, MissingDependency, first_line

EXIT_TIMEOUT_S = 5  # how long Triton waits for in-flight requests when told to stop


class ServeOptions(object):
    """Where and how ``trtkit serve`` listens: ports (``metrics_port`` 0: no metrics), the address to bind,
    ``max_batch`` (None: the engine profile's max, else 32), ``precisions`` (None: every artifact that passed
    verification), ``images`` (also serve the ``_images`` models), ``top_k`` and the batcher's queue delay."""

    def __init__(self, http_port=8000, grpc_port=8001, metrics_port=8002, address="127.0.0.1", max_batch=None,
                 precisions=None, images=True, top_k=5, max_queue_delay_us=100):
        for flag, port in (("--http-port", http_port), ("--grpc-port", grpc_port), ("--metrics-port", metrics_port)):
            if not 0 <= int(port) < 65536 or (int(port) == 0 and flag != "--metrics-port"):
                raise InputError("{} must be a port number (1-65535), got {}".format(flag, port))
        ports = [p for p in (http_port, grpc_port, metrics_port) if p]
        if len(set(ports)) != len(ports):
            raise InputError("the HTTP, gRPC and metrics ports must differ, got {}".format(
                ", ".join(str(p) for p in ports)))
        if max_batch is not None and int(max_batch) < 1:
            raise InputError("--max-batch must be at least 1, got {}".format(max_batch))
        if int(top_k) < 1:
            raise InputError("--top-k must be at least 1, got {}".format(top_k))
        if int(max_queue_delay_us) < 0:
            raise InputError("--max-queue-delay-us must be 0 or more")
        self.http_port, self.grpc_port, self.metrics_port = int(http_port), int(grpc_port), int(metrics_port)
        self.address = address
        self.max_batch = int(max_batch) if max_batch is not None else None
        self.precisions = precisions
        self.images = bool(images)
        self.top_k = int(top_k)
        self.max_queue_delay_us = int(max_queue_delay_us)

    @staticmethod
    def add_arguments(parser):
        net = parser.add_argument_group("server")
        net.add_argument("--http-port", type=int, default=8000, help="HTTP port (default: 8000)")
        net.add_argument("--grpc-port", type=int, default=8001, help="gRPC port (default: 8001)")
        net.add_argument("--metrics-port", type=int, default=8002, help="Prometheus metrics port, 0 for none "
                                                                         "(default: 8002)")
        net.add_argument("--address", default="127.0.0.1",
                         help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every "
                              "interface)")
        models = parser.add_argument_group("models")
        models.add_argument("--precision", metavar="LIST",
                            help="serve these precisions, e.g. fp16 or fp32,fp16 (default: every artifact that "
                                 "passed verification)")
        models.add_argument("--max-batch", type=int, metavar="N",
                            help="largest batch Triton forms (default: the engine profile's max; 32 for ONNX)")
        models.add_argument("--max-queue-delay-us", type=int, default=100, metavar="US",
                            help="how long a request may wait for a fuller batch (default: 100)")
        models.add_argument("--top-k", type=int, default=5, metavar="K",
                            help="classes the _images models of a classifier return per image (default: 5)")
        models.add_argument("--no-images", action="store_true",
                            help="serve only the preprocessed-input models, not the _images ones")

    @classmethod
    def from_args(cls, args):
        precisions = [p.strip().lower() for p in args.precision.split(",") if p.strip()] if args.precision else None
        return cls(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                   address=args.address, max_batch=args.max_batch, precisions=precisions, images=not args.no_images,
                   top_k=args.top_k, max_queue_delay_us=args.max_queue_delay_us)


def require_pytriton():
    """PyTriton's Triton class, or MissingDependency naming the ``serve`` extra."""
    if sys.version_info < (3, 8):
        raise MissingDependency("trtkit serve needs Python 3.8 or newer (PyTriton); this is {}.{}".format(
            *sys.version_info[:2]), hint="serve from a Python 3.8+ environment: pip install 'trtkit[serve]'")
    from trtkit.deps import require
    return require("pytriton.triton", "trtkit serve (a Triton Inference Server through PyTriton)")


def use_this_libpython():
    """Put this interpreter's own libpython first on the library path of the processes Triton starts.

    PyTriton's backend stub (started by tritonserver, a child of this process)
    embeds Python by loading ``libpython3.X.so`` by name. Where the running
    interpreter is not the system's (pyenv, conda, a venv of one), the dynamic
    loader finds the system's libpython of the same minor version but another
    patch release, whose C internals differ, and model loading fails deep in
    multiprocessing (``'_thread.RLock' object has no attribute '_recursion_count'``
    with 3.11.2 loaded under a 3.11.7 stdlib). Children inherit os.environ, and
    PyTriton appends its own library folder after what is already there.
    """
    import sysconfig
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir or not os.path.isdir(libdir):
        return
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if current.split(os.pathsep)[0] != libdir:
        os.environ["LD_LIBRARY_PATH"] = libdir + (os.pathsep + current if current else "")


def check_ports(options):
    """InputError naming a port already in use (tritonserver would exit with a bind error deep in its log)."""
    import errno
    import socket
    for flag, port in (("--http-port", options.http_port), ("--grpc-port", options.grpc_port),
                       ("--metrics-port", options.metrics_port)):
        if not port:
            continue
        probe = socket.socket(socket.AF_INET6 if ":" in options.address else socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((options.address, port))
        except socket.error as exc:
            if exc.errno == errno.EADDRINUSE:
                raise InputError("port {} on {} is in use".format(port, options.address),
                                 hint="stop what listens there, or choose another with {}".format(flag))
            raise InputError("cannot listen on {}:{} ({})".format(options.address, port, exc.strerror or exc),
                             hint="check --address")
        finally:
            probe.close()


def targets_of(path, precisions=None):
    """The Targets to serve: every passing artifact of a build (or of ``precisions``), or the one artifact given."""
    from trtkit.app.locate import is_build, locate, read_build, serving_targets
    if is_build(path):
        return serving_targets(read_build(path), precisions)
    if precisions and len(precisions) > 1:
        raise InputError("{} is one artifact; --precision {} names several".format(path, ",".join(precisions)))
    return [locate(path, precisions[0] if precisions else None)]


def serve(path, options=None, stop=None, on_ready=None):
    """Serve the build (or artifact) at ``path`` until SIGINT/SIGTERM or until ``stop`` (a threading.Event) is set.

    ``on_ready(models)`` is called once every model is loaded, with one dict per model (name, inputs, outputs).
    """
    import logging
    import tempfile
    options = options or ServeOptions()
    pytriton = require_pytriton()
    from trtkit.app.triton_models import Worker, bindings
    targets = targets_of(path, options.precisions)
    check_ports(options)
    use_this_libpython()
    if not log.is_verbose():
        logging.getLogger("pytriton").setLevel(logging.ERROR)  # bad requests get one line from trtkit instead
    stop = stop or threading.Event()
    restore = _handle_signals(stop)
    workers, triton, log_dir = [], None, tempfile.mkdtemp(prefix="trtkit-serve-")
    log_file = os.path.join(log_dir, "tritonserver.log")
    failed = True
    try:
        for target in targets:
            log.info("loading {} ({}, {}) ...".format(target.name, target.backend, target.precision or "-"))
            workers.append(Worker(target, options.max_batch))
        stop.loading = False
        config = pytriton.TritonConfig(
            http_address=options.address, http_port=options.http_port, grpc_address=options.address,
            grpc_port=options.grpc_port, allow_metrics=bool(options.metrics_port),
            metrics_port=options.metrics_port or None, exit_timeout_secs=EXIT_TIMEOUT_S,
            log_file=None if log.is_verbose() else log_file)
        # models go into a local model store before tritonserver starts, so it loads them at startup and
        # /v2/health/ready (strict readiness) says ready only once every model is (by default PyTriton loads
        # them one by one after the server reports ready with none)
        triton = pytriton.Triton(config=config, triton_lifecycle_policy=pytriton.TritonLifecyclePolicy(
            launch_triton_on_startup=False, local_model_store=True))
        models = []
        for worker in workers:
            for binding in bindings(worker, options.max_batch, options.images, options.top_k,
                                    options.max_queue_delay_us):
                triton.bind(**binding)
                models.append(_describe(binding, worker))
        try:
            triton.run()
        except Exception as exc:  # PyTriton raises its own errors and TimeoutError when tritonserver fails
            raise InputError("Triton Inference Server did not start: {}".format(first_line(exc)),
                             hint="its log: {}".format(log_file))
        _announce(models, options)
        if on_ready is not None:
            on_ready(models)
        while not stop.wait(1.0):
            if not triton.is_alive():
                raise InputError("Triton Inference Server stopped unexpectedly", hint="its log: {}".format(log_file))
        log.info("stopping ...")
        failed = False
    finally:
        if triton is not None:
            triton.stop()
        for worker in workers:
            worker.close()
        restore()
        if not failed or not os.path.isfile(log_file):
            import shutil
            shutil.rmtree(log_dir, ignore_errors=True)
    log.info("stopped")


def _handle_signals(stop):
    """SIGINT and SIGTERM set ``stop``; while the runners load they also interrupt (KeyboardInterrupt, so what was
    loaded is closed on the way out). Main thread only (Python delivers signals there); returns the undo."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {}

    def handler(*_):
        stop.set()
        if stop.loading:  # nothing started yet but the runners: interrupt; once Triton starts, let it come up
            raise KeyboardInterrupt  # and stop it cleanly (killed mid-start it leaves its backend stubs behind)

    stop.loading = True
    for number in (signal.SIGINT, signal.SIGTERM):
        previous[number] = signal.signal(number, handler)

    def restore():
        for number, handler in previous.items():
            signal.signal(number, handler)
    return restore


def _describe(binding, worker):
    def tensor(spec):
        return {"name": spec.name, "dtype": getattr(spec.dtype, "__name__", str(spec.dtype)),
                "shape": [-1] + [int(d) for d in spec.shape]}
    return {"model": binding["model_name"], "artifact": worker.target.name, "precision": worker.target.precision,
            "backend": worker.target.backend, "max_batch_size": binding["config"].max_batch_size,
            "inputs": [tensor(t) for t in binding["inputs"]], "outputs": [tensor(t) for t in binding["outputs"]]}


def _announce(models, options):
    host = options.address if options.address not in ("0.0.0.0", "::") else "localhost"
    for model in models:
        log.info("  {:<28} {} -> {}  (max batch {})".format(
            model["model"], ", ".join("{} {}".format(t["name"], t["shape"]) for t in model["inputs"]),
            ", ".join(t["name"] for t in model["outputs"]), model["max_batch_size"]))
    log.info("serving {} models: HTTP {}:{}, gRPC {}:{}{}; ready at http://{}:{}/v2/health/ready "
             "(Ctrl+C or SIGTERM stops)".format(
                 len(models), host, options.http_port, host, options.grpc_port,
                 ", metrics {}:{}".format(host, options.metrics_port) if options.metrics_port else "",
                 host, options.http_port, ))
