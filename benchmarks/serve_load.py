#!/usr/bin/env python3
"""Load on ``trtkit serve``: client threads over HTTP and gRPC against a served build, next to the direct runner.

    python benchmarks/serve_load.py                          # builds the sample (FP32), serves it, loads it
    python benchmarks/serve_load.py --build build/engines --precision fp16 --threads 1,4,8 --batch 8 --save

Starts ``trtkit serve BUILD --precision P`` on loopback (free ports) in a
child process, then for each protocol (HTTP, gRPC) and each client thread
count sends requests of ``--batch`` preprocessed images to
``<name>_<precision>``, each thread with its own tritonclient client, for at
most ``--seconds`` or ``--requests`` requests per thread (after a warm-up),
and records every request's latency and every error. The direct runner
(``trtkit.load(...).runner.infer`` on the same batch, one thread, in this
process) is measured before the server starts and after it stops; the faster
of the two is the reference. Printed:
images/s, requests/s, p50/p99 latency and errors per setting, and the
overhead: served p50 at one thread minus the direct p50 (the cost of the
protocol, Triton's queue and PyTriton's hop), and served images/s at the best
setting over the direct images/s.

``perf_analyzer`` runs too when it is on PATH (``pip install perf-analyzer``
gives a placeholder without the binary on some indexes; NGC's
``tritonserver:<ver>-py3-sdk`` image has it). ``--save`` writes
``benchmarks/results/<device>/serve_load.{md,json}``. Clients, server and
runner share the machine's cores: on a small machine the served figures are
bounded by that sharing, say so when quoting them.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def free_ports(count):
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    for probe in sockets:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in sockets]
    for probe in sockets:
        probe.close()
    return ports


def percentile(values, q):
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else None


def summary(latencies, errors, seconds, batch):
    done = len(latencies)
    return {"requests": done, "errors": errors, "seconds": round(seconds, 3),
            "images_per_s": round(done * batch / seconds, 1) if seconds > 0 else None,
            "requests_per_s": round(done / seconds, 1) if seconds > 0 else None,
            "p50_ms": _ms(percentile(latencies, 50)), "p99_ms": _ms(percentile(latencies, 99))}


def _ms(seconds):
    return round(seconds * 1000.0, 3) if seconds is not None else None


def direct(build, precision, batch, seconds, warmup):
    """The runner the server uses, called directly: one thread, the same batch, no server running."""
    import trtkit
    images = np.random.RandomState(0).randn(batch, *_shape(build)).astype(np.float32)
    with trtkit.load(build, precision=precision) as model:
        runner = model.runner
        for _ in range(warmup):
            runner.infer(images)
        latencies, start = [], time.perf_counter()
        while time.perf_counter() - start < seconds:
            began = time.perf_counter()
            runner.infer(images)
            latencies.append(time.perf_counter() - began)
        record = summary(latencies, 0, time.perf_counter() - start, batch)
        record.update(artifact=model.name, backend=model.backend, device=runner.device)
    return record


def _shape(build):
    from trtkit.app.locate import locate
    return locate(build).contract.shape


def load(protocol, port, model, threads, batch, shape, seconds, requests, warmup):
    """``threads`` clients sending ``batch``-image requests: latencies of all, errors counted (first kept)."""
    module = __import__("tritonclient.{}".format(protocol), fromlist=["InferenceServerClient"])
    images = np.random.RandomState(1).randn(batch, *shape).astype(np.float32)
    latencies, errors, first_error = [], [0], []
    lock = threading.Lock()
    go = threading.Event()

    def worker():
        client = module.InferenceServerClient("127.0.0.1:{}".format(port))
        tensor = module.InferInput("input", list(images.shape), "FP32")
        tensor.set_data_from_numpy(images)
        for _ in range(warmup):
            client.infer(model, [tensor])
        go.wait()
        mine, bad, end = [], 0, time.perf_counter() + seconds
        while len(mine) + bad < requests and time.perf_counter() < end:
            began = time.perf_counter()
            try:
                client.infer(model, [tensor]).as_numpy("logits")
                mine.append(time.perf_counter() - began)
            except Exception as exc:  # counted, the first one reported
                bad += 1
                with lock:
                    first_error.append(str(exc).splitlines()[0][:200])
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    time.sleep(0.2 + 0.05 * threads)  # let every client finish its warm-up
    start = time.perf_counter()
    go.set()
    for thread in pool:
        thread.join()
    record = summary(latencies, errors[0], time.perf_counter() - start, batch)
    record.update(protocol=protocol, threads=threads, batch=batch)
    if first_error:
        record["first_error"] = first_error[0]
    return record


def perf_analyzer(model, grpc_port, batch, shape):
    """perf_analyzer's own figures at concurrency 1..4, or why it did not run."""
    binary = shutil.which("perf_analyzer")
    if not binary:
        return {"ran": False, "why": "perf_analyzer is not on PATH (the perf-analyzer package here is a "
                                     "placeholder without the binary)"}
    command = [binary, "-m", model, "-u", "127.0.0.1:{}".format(grpc_port), "-i", "grpc", "-b", str(batch),
               "--shape", "input:" + ",".join(str(d) for d in shape), "--concurrency-range", "1:4",
               "--measurement-interval", "3000"]
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            timeout=300)
    return {"ran": True, "command": " ".join(command), "returncode": result.returncode,
            "output": result.stdout[-4000:]}


def start_server(build, precision, ports, max_batch, log_path):
    command = [sys.executable, "-m", "trtkit", "serve", build, "--precision", precision, "--no-images",
               "--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])]
    if max_batch:
        command += ["--max-batch", str(max_batch)]
    log = open(log_path, "w")
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env=dict(os.environ, PYTHONPATH=ROOT))
    import tritonclient.http as http
    client = http.InferenceServerClient("127.0.0.1:{}".format(ports[0]))
    deadline = time.time() + 300
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit("trtkit serve exited with {}; see {}".format(process.returncode, log_path))
        try:
            if client.is_server_ready():
                return process, "trtkit " + " ".join(command[3:])
        except Exception:
            pass
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    raise SystemExit("trtkit serve was not ready within 300 s; see {}".format(log_path))


def stop_server(process):
    start = time.time()
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
    return code, round(time.time() - start, 1)


def sample_build(folder, precision):
    command = [sys.executable, "-m", "trtkit", "build", "--out", folder, "--precision", precision,
               "--backend", "onnxruntime", "--verify-images", "64", "--bench-seconds", "0.5", "-q"]
    subprocess.check_call(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    return folder


def report(record):
    lines = ["serve load: {} ({}) served by `{}`, batch {} per request, {} s or {} requests per thread "
             "after {} warm-up requests; {}".format(record["model"], record["artifact"], record["serve_command"],
                                                    record["batch"], record["seconds"], record["requests"],
                                                    record["warmup"], record["machine"]), "",
             "| path | client threads | requests | errors | images/s | requests/s | p50 ms | p99 ms |",
             "|---|---|---|---|---|---|---|---|"]
    d = record["direct"]
    for when, run in zip(("before serving", "after serving"), record["direct_runs"]):
        lines.append("| direct runner ({}, {}), {} | 1 | {} | 0 | {} | {} | {} | {} |".format(
            run["backend"], run["device"], when, run["requests"], run["images_per_s"], run["requests_per_s"],
            run["p50_ms"], run["p99_ms"]))
    for r in record["served"]:
        lines.append("| served, {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["protocol"], r["threads"], r["requests"], r["errors"], r["images_per_s"], r["requests_per_s"],
            r["p50_ms"], r["p99_ms"]))
    o = record["overhead"]
    lines += ["", "Overhead: served p50 at 1 thread minus direct p50: HTTP {} ms, gRPC {} ms; best served images/s "
              "{} ({}, {} threads) = {:.0%} of the (faster) direct runner's {}.".format(
                  o["http_p50_ms"], o["grpc_p50_ms"], o["best_images_per_s"], o["best_protocol"], o["best_threads"],
                  o["best_fraction_of_direct"], d["images_per_s"]),
              "Errors in all: {}. SIGTERM stopped the server in {} s (exit code {}).".format(
                  sum(r["errors"] for r in record["served"]), record["stop_seconds"], record["stop_code"])]
    pa = record["perf_analyzer"]
    lines.append("perf_analyzer: " + (pa["why"] if not pa["ran"] else "exit {}, see serve_load.json".format(
        pa["returncode"])))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", help="a build folder (default: build the sample into a temporary folder)")
    parser.add_argument("--precision", default="fp32", help="the artifact to serve (default: fp32)")
    parser.add_argument("--batch", type=int, default=8, help="images per request (default: 8)")
    parser.add_argument("--threads", default="1,4,8", help="client thread counts (default: 1,4,8)")
    parser.add_argument("--seconds", type=float, default=10.0, help="time bound per setting (default: 10)")
    parser.add_argument("--requests", type=int, default=1000, help="request bound per thread (default: 1000)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up requests per client (default: 5)")
    parser.add_argument("--max-batch", type=int, help="trtkit serve --max-batch (default: its own)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/results/<device>/serve_load.{md,json}")
    args = parser.parse_args(argv)
    from trtkit.bench.device import device_record, device_slug
    work = tempfile.mkdtemp(prefix="trtkit-serve-load-")
    try:
        build = args.build or sample_build(os.path.join(work, "build"), args.precision)
        shape = _shape(build)
        print("direct runner ...", file=sys.stderr)
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        record = {"batch": args.batch, "seconds": args.seconds, "requests": args.requests, "warmup": args.warmup,
                  "direct_runs": [direct(build, args.precision, args.batch, args.seconds, args.warmup)]}
        from trtkit.app.locate import locate
        from trtkit.app.triton_models import model_names
        target = locate(build, precision=args.precision)
        record.update(model=model_names(target)[0], artifact=target.name)
        ports = free_ports(3)
        process, record["serve_command"] = start_server(build, args.precision, ports, args.max_batch,
                                                        os.path.join(work, "serve.log"))
        try:
            record["served"] = []
            for protocol, port in (("http", ports[0]), ("grpc", ports[1])):
                for threads in [int(t) for t in args.threads.split(",") if t.strip()]:
                    print("{} x {} threads ...".format(protocol, threads), file=sys.stderr)
                    record["served"].append(load(protocol, port, record["model"], threads, args.batch, shape,
                                                 args.seconds, args.requests, args.warmup))
            record["perf_analyzer"] = perf_analyzer(record["model"], ports[1], args.batch, shape)
        finally:
            record["stop_code"], record["stop_seconds"] = stop_server(process)
        print("direct runner again ...", file=sys.stderr)
        record["direct_runs"].append(direct(build, args.precision, args.batch, args.seconds, args.warmup))
        # compared with the faster direct run (before or after the server): the overhead is not understated
        record["direct"] = max(record["direct_runs"], key=lambda r: r["images_per_s"] or 0)
        device = device_record(import_torch=False)
        cpu = device.get("cpu", {})
        record["device"] = device
        load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        record["machine"] = "{} ({} usable cores), load average {:.1f} before the run, {:.1f} after".format(
            cpu.get("model") or "?", cpu.get("usable_cores") or "?", load_before, load_after)
        record["overhead"] = overhead(record)
        text = report(record)
        print(text)
        if args.save:
            folder = os.path.join(ROOT, "benchmarks", "results", device_slug(device))
            if not os.path.isdir(folder):
                os.makedirs(folder)
            with open(os.path.join(folder, "serve_load.md"), "w") as handle:
                handle.write(text + "\n")
            with open(os.path.join(folder, "serve_load.json"), "w") as handle:
                json.dump(record, handle, indent=1, sort_keys=True)
            print("saved in {}".format(folder), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def overhead(record):
    direct_record = record["direct"]

    def p50(protocol):
        rows = [r for r in record["served"] if r["protocol"] == protocol and r["threads"] == 1]
        return round(rows[0]["p50_ms"] - direct_record["p50_ms"], 3) if rows and rows[0]["p50_ms"] else None

    best = max(record["served"], key=lambda r: r["images_per_s"] or 0)
    return {"http_p50_ms": p50("http"), "grpc_p50_ms": p50("grpc"), "best_images_per_s": best["images_per_s"],
            "best_protocol": best["protocol"], "best_threads": best["threads"],
            "best_fraction_of_direct": (best["images_per_s"] or 0) / direct_record["images_per_s"]}


if __name__ == "__main__":
    sys.exit(main())
