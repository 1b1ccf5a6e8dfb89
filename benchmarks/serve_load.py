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
(``trtkit.load(...).runner.infer`` on the same batch, one thread, in a child
process in a session of its own like the server's) is timed while the server
idles, interleaved with the served settings over ``--rounds`` rounds, so both
see the same machine; medians are reported. Printed:
images/s, requests/s, p50/p99 latency and errors per setting, and the
overhead: the served latency at one client thread minus the direct one (the
cost of the protocol, Triton's queue and PyTriton's hop), by the fastest
request and by the medians, and the best served images/s over the direct
runner's.

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
            "min_ms": _ms(min(latencies)) if latencies else None,
            "p50_ms": _ms(percentile(latencies, 50)), "p99_ms": _ms(percentile(latencies, 99))}


def _ms(seconds):
    return round(seconds * 1000.0, 3) if seconds is not None else None


def direct(build, precision, batch, seconds, warmup):
    """The runner the server uses, called directly (one thread, the same batch) in a child process started like
    the server: in a session of its own. On Linux with autogroup scheduling each session gets an equal share of
    a busy machine, so a runner timed in this process's session would be compared unfairly with the server's."""
    command = [sys.executable, os.path.abspath(__file__), "--direct-child", json.dumps(
        [build, precision, batch, seconds, warmup])]
    output = subprocess.check_output(command, cwd=ROOT, start_new_session=True, universal_newlines=True,
                                     env=dict(os.environ, PYTHONPATH=ROOT))
    return json.loads(output.strip().splitlines()[-1])


def direct_child(build, precision, batch, seconds, warmup):
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
    print(json.dumps(record))


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


def median_of(runs):
    """One row from repeated runs of a setting: medians of the rates and percentiles, sums of counts."""
    def med(key):
        values = sorted(r[key] for r in runs if r[key] is not None)
        return values[len(values) // 2] if values else None
    row = dict(runs[0], requests=sum(r["requests"] for r in runs), errors=sum(r["errors"] for r in runs))
    row.update((key, med(key)) for key in ("images_per_s", "requests_per_s", "p50_ms", "p99_ms"))
    row["images_per_s_runs"] = [r["images_per_s"] for r in runs]
    row["best_images_per_s"] = max(r["images_per_s"] or 0 for r in runs)
    row["min_ms"] = min(r["min_ms"] for r in runs if r["min_ms"] is not None)
    return row


def report(record):
    lines = ["serve load: {} ({}) served by `{}`; batch {} per request; per setting and round {} s or {} requests "
             "per thread after {} warm-up requests; {} rounds, interleaved (direct, then every served setting), "
             "medians shown; {}".format(record["model"], record["artifact"], record["serve_command"], record["batch"],
                                        record["seconds"], record["requests"], record["warmup"], record["rounds"],
                                        record["machine"]), "",
             "| path | client threads | requests | errors | images/s (median) | images/s per round | "
             "requests/s | min ms | p50 ms | p99 ms |", "|---|---|---|---|---|---|---|---|---|---|"]
    d = record["direct"]
    lines.append("| direct runner ({}, {}) | 1 | {} | 0 | {} | {} | {} | {} | {} | {} |".format(
        d["backend"], d["device"], d["requests"], d["images_per_s"], ", ".join(str(v) for v in d["images_per_s_runs"]),
        d["requests_per_s"], d["min_ms"], d["p50_ms"], d["p99_ms"]))
    for r in record["served"]:
        lines.append("| served, {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["protocol"], r["threads"], r["requests"], r["errors"], r["images_per_s"],
            ", ".join(str(v) for v in r["images_per_s_runs"]), r["requests_per_s"], r["min_ms"], r["p50_ms"],
            r["p99_ms"]))
    o = record["overhead"]
    lines += ["", "Overhead per request at 1 client thread, by the fastest request (the figure interference from "
              "other work disturbs least): HTTP {} ms, gRPC {} ms over the direct runner's {} ms; by the "
              "medians: HTTP {} ms, gRPC {} ms. Best round's served images/s {} ({}, {} threads) = {:.0%} of the "
              "direct runner's best round, {}.".format(
                  o["http_min_ms"], o["grpc_min_ms"], d["min_ms"], o["http_p50_ms"], o["grpc_p50_ms"],
                  o["best_images_per_s"], o["best_protocol"], o["best_threads"], o["best_fraction_of_direct"],
                  d["best_images_per_s"]),
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
    parser.add_argument("--seconds", type=float, default=3.0, help="time bound per setting and round (default: 3)")
    parser.add_argument("--requests", type=int, default=1000, help="request bound per thread (default: 1000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default: 5)")
    parser.add_argument("--warmup", type=int, default=5, help="warm-up requests per client (default: 5)")
    parser.add_argument("--max-batch", type=int, help="trtkit serve --max-batch (default: its own)")
    parser.add_argument("--save", action="store_true", help="write benchmarks/results/<device>/serve_load.{md,json}")
    parser.add_argument("--direct-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.direct_child:
        return direct_child(*json.loads(args.direct_child))
    from trtkit.app.locate import locate
    from trtkit.app.triton_models import model_names
    from trtkit.bench.device import device_record, device_slug
    work = tempfile.mkdtemp(prefix="trtkit-serve-load-")
    try:
        build = args.build or sample_build(os.path.join(work, "build"), args.precision)
        shape = _shape(build)
        target = locate(build, precision=args.precision)
        record = {"batch": args.batch, "seconds": args.seconds, "requests": args.requests, "warmup": args.warmup,
                  "rounds": args.rounds, "model": model_names(target)[0], "artifact": target.name,
                  "direct_runs": [], "served_runs": []}
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
        ports = free_ports(3)
        process, record["serve_command"] = start_server(build, args.precision, ports, args.max_batch,
                                                        os.path.join(work, "serve.log"))
        settings = [(protocol, port, int(threads)) for protocol, port in (("http", ports[0]), ("grpc", ports[1]))
                    for threads in args.threads.split(",") if threads.strip()]
        try:
            for round_index in range(args.rounds):  # the server idles while the direct runner is timed
                print("round {}: direct runner ...".format(round_index + 1), file=sys.stderr)
                record["direct_runs"].append(direct(build, args.precision, args.batch, args.seconds, args.warmup))
                for protocol, port, threads in settings:
                    print("round {}: {} x {} threads ...".format(round_index + 1, protocol, threads), file=sys.stderr)
                    record["served_runs"].append(load(protocol, port, record["model"], threads, args.batch, shape,
                                                      args.seconds, args.requests, args.warmup))
            record["perf_analyzer"] = perf_analyzer(record["model"], ports[1], args.batch, shape)
        finally:
            record["stop_code"], record["stop_seconds"] = stop_server(process)
        record["direct"] = median_of(record["direct_runs"])
        record["served"] = [median_of([r for r in record["served_runs"] if (r["protocol"], r["threads"]) == (p, t)])
                            for p, _, t in settings]
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

    def single(protocol, key):
        rows = [r for r in record["served"] if r["protocol"] == protocol and r["threads"] == 1]
        return round(rows[0][key] - direct_record[key], 3) if rows and rows[0][key] is not None else None

    best = max(record["served"], key=lambda r: r["best_images_per_s"])
    return {"http_min_ms": single("http", "min_ms"), "grpc_min_ms": single("grpc", "min_ms"),
            "http_p50_ms": single("http", "p50_ms"), "grpc_p50_ms": single("grpc", "p50_ms"),
            "best_images_per_s": best["best_images_per_s"], "best_protocol": best["protocol"],
            "best_threads": best["threads"],
            "best_fraction_of_direct": best["best_images_per_s"] / direct_record["best_images_per_s"]}


if __name__ == "__main__":
    sys.exit(main())
