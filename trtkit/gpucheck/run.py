"""Running ``gpu_check``: the plan, one child process per step inside a time budget, the result files.

Each step runs as ``python -m trtkit.gpucheck.steps REQUEST`` with its share of
the remaining budget (``plan.allot``) as a hard limit: a step that crashes,
fails or hangs is recorded with its exact error (and the end of its log) and
the next one runs; what it had saved before (measured rows) is kept beside
its error. After every step the results folder is rewritten
(atomically), so a run stopped from outside still leaves what it measured.

Results (``--out``, default ``benchmarks/results/<gpu-slug>/``):
``device.json`` (the device record), ``gpu_check.json`` (plan, every step's
full result, times), ``gpu_check.md`` (the report) and ``gpu_check.log``
(every step's output).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from trtkit import log
from trtkit.errors import InputError
from trtkit.fileio import read_json, write_json, write_text
from trtkit.gpucheck.plan import (allot, format_plan, is_prerequisite, make_plan, minimum_budget, parse_skip,
                                  probe_environment)
from trtkit.gpucheck.steps import keep_partial

DEFAULT_BUDGET_SECONDS = 540.0
RESULT_FILES = ("device.json", "gpu_check.json", "gpu_check.md", "gpu_check.log")
LOG_TAIL_LINES = 30


class CheckOptions(object):
    """``out``: results folder (None: benchmarks/results/<device slug>); ``budget_seconds``: the whole run's
    limit; ``skip``: step names; ``train_data``: a CIFAR-10 folder instead of synthetic data; ``work``: keep
    the builds there (None: a temporary folder, removed); ``dry_run``: print the plan only."""

    def __init__(self, out=None, budget_seconds=DEFAULT_BUDGET_SECONDS, skip=(), train_data=None, work=None,
                 dry_run=False, command=None):
        self.out = out
        self.budget_seconds = float(budget_seconds)
        self.skip = parse_skip(skip)
        self.train_data = os.path.abspath(train_data) if train_data else None
        self.work = work
        self.dry_run = bool(dry_run)
        self.command = command or "python scripts/gpu_check.py"
        if self.budget_seconds <= 0:
            raise InputError("--budget-seconds must be positive, got {:g}".format(self.budget_seconds),
                             hint="e.g. --budget-seconds 540 (9 minutes)")
        if self.train_data and not os.path.isdir(self.train_data):
            raise InputError("--train-data {} is not a folder".format(train_data),
                             hint="give the extracted cifar-10-batches-py folder, or leave it out for synthetic data")


def run_check(options):
    """The whole check (or, with ``dry_run``, its plan on stdout); returns the exit code."""
    from trtkit.bench.device import describe, device_record
    started = time.time()
    plan = make_plan(probe_environment(), options.skip)
    light = device_record(import_torch=False)
    out = options.out or os.path.join("benchmarks", "results", light["slug"])
    if options.dry_run:
        print(format_plan(plan, describe(light), options.budget_seconds, out))
        return 0
    needed = minimum_budget(plan)
    if needed is not None and options.budget_seconds < needed:
        raise InputError("--budget-seconds {:g} is too small for this plan: {} and the cheapest step that uses "
                         "them need {:.0f} s".format(options.budget_seconds, ", ".join(
                             p.name for p in plan if p.run and is_prerequisite(p.step)), needed),
                         hint="give --budget-seconds {:.0f} or more, or --skip steps".format(needed))
    work = options.work or tempfile.mkdtemp(prefix="trtkit-gpu-check-")
    if not os.path.isdir(work):
        os.makedirs(work)
    record = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "command": options.command,
              "budget_seconds": options.budget_seconds, "device": light, "plan": [p.to_dict() for p in plan],
              "steps": {}}
    log_path = os.path.join(work, "gpu_check.log")
    try:
        def run(name, seconds):
            return run_step_process(name, seconds, work, {"train_data": options.train_data}, log_path)
        for index, planned in enumerate(plan):
            result = run_planned(plan, index, record["steps"], options.budget_seconds - (time.time() - started), run)
            record["steps"][planned.name] = result
            if planned.name == "device" and result.get("device"):
                record["device"] = result["device"]
            record["seconds"] = round(time.time() - started, 1)
            write_results(out, record, log_path)
    finally:
        if not options.work:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join("{:<17} {:<9} {}".format(name, r.get("status"), _short(r)) for name, r in record["steps"].items()))
    print("results: {}".format(", ".join(os.path.join(out, name) for name in RESULT_FILES)))
    broken = [n for n, r in record["steps"].items() if r.get("status") in ("failed", "timeout")]
    return 1 if broken else 0


def _short(result):
    from trtkit.gpucheck.report import step_detail
    return step_detail(result)[:110]


def run_planned(plan, index, done, remaining, run):
    """One planned step: skipped (plan, failed helper, budget) or run by ``run(name, seconds)`` (its child
    process) with its share of the ``remaining`` seconds; ``done``: the results of the steps before it."""
    planned = plan[index]
    if not planned.run:
        return {"status": "skipped", "reason": planned.why()}
    for helper in planned.after:
        status = (done.get(helper) or {}).get("status")
        if status != "ok":
            return {"status": "skipped", "reason": "needs the {} step, which ended {}".format(helper, status)}
    later = [p.step for p in plan[index + 1:] if p.run]
    seconds, why = allot(planned.step, remaining, later)
    if seconds is None:
        return {"status": "skipped", "reason": why}
    log.info("[{}/{}] {} ({:.0f} s at most) ...".format(index + 1, len(plan), planned.name, seconds))
    result = run(planned.name, seconds)
    log.info("[{}/{}] {}: {} after {} s".format(index + 1, len(plan), planned.name, result.get("status"),
                                              result.get("wall_seconds")))
    return result


def child_environment():
    """The child's environment: this trtkit first on the path, unbuffered output."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_step_process(name, seconds, work, step_options, log_path, function=None):
    """Run step ``name`` in a child limited to ``seconds``; its result, or what went wrong, as a dict (with
    whatever the step had saved before it failed). ``function``: "file.py:name" to run instead of the step
    of that name (see ``steps.step_function``)."""
    request_path = os.path.join(work, "{}.request.json".format(name))
    result_path = os.path.join(work, "{}.result.json".format(name))
    if os.path.exists(result_path):
        os.remove(result_path)
    write_json(request_path, {"step": name, "seconds": seconds, "work": work, "result": result_path,
                              "options": step_options, "function": function})
    begin = time.time()
    with open(log_path, "a") as handle:
        handle.write("\n===== {} (at most {:.0f} s) =====\n".format(name, seconds))
        handle.flush()
        offset = handle.tell()
        proc = subprocess.Popen([sys.executable, "-m", "trtkit.gpucheck.steps", request_path], stdout=handle,
                                stderr=subprocess.STDOUT, env=child_environment(), start_new_session=True)
        timed_out = False
        try:
            code = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
            code = _stop(proc)
        except BaseException:  # Ctrl-C: the child has its own process group, so stop it too
            _stop(proc)
            raise
    result = _read_result(result_path)
    # what the step saved stays; how it ended is added beside it (steps.keep_partial), never instead of it
    if timed_out:
        result = keep_partial(result, {"status": "timeout", "error": "stopped after {:.0f} s, its share of the "
                                                                     "time budget".format(seconds)})
    elif code != 0 or not result or result.get("status") == "running":
        result = keep_partial(result, {"status": "failed", "error": "the step's process {} without {}".format(
            _ended(code), "its final result" if result else "a result")})
    if result["status"] in ("failed", "timeout"):
        result["log_tail"] = log_tail(log_path, offset)
    result["allotted_seconds"] = round(seconds, 1)
    result["wall_seconds"] = round(time.time() - begin, 1)
    return result


def _read_result(path):
    try:
        return read_json(path) if os.path.isfile(path) else {}
    except ValueError:
        return {}


def _ended(code):
    if code is not None and code < 0:
        try:
            return "was killed by signal {} ({})".format(-code, signal.Signals(-code).name)
        except ValueError:
            return "was killed by signal {}".format(-code)
    return "exited with code {}".format(code)


def _stop(proc):
    """End a child that outlived its time, with everything it started (its own process group)."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            return proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return proc.poll()


def log_tail(path, offset, lines=LOG_TAIL_LINES):
    """The last ``lines`` lines a step wrote to the shared log (from ``offset``)."""
    with open(path, "r") as handle:
        handle.seek(offset)
        text = handle.read()
    return "\n".join(text.rstrip().splitlines()[-lines:])


def write_results(out, record, log_path):
    """device.json, gpu_check.json, gpu_check.md and gpu_check.log in ``out`` (each written atomically)."""
    from trtkit.gpucheck.report import markdown_report
    if not os.path.isdir(out):
        os.makedirs(out)
    write_json(os.path.join(out, "device.json"), record.get("device"))
    write_json(os.path.join(out, "gpu_check.json"), record)
    write_text(os.path.join(out, "gpu_check.md"), markdown_report(record))
    if os.path.isfile(log_path):
        with open(log_path, "r") as handle:
            write_text(os.path.join(out, "gpu_check.log"), handle.read())
