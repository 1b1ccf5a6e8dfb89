"""The device step's time budget is derived from a stated cold-start figure (issue 23, item 9).

A cold driver start (what a cold ``nvidia-smi`` pays with persistence mode off) costs about 1-3 s per GPU;
``gpucheck.plan.device_step`` derives the step's floor from that figure and its warm work, and the plan's
own timing model (``allot``) never gives a step less than its floor.
"""

import pytest



def test_the_device_step_budget_is_derived_from_a_cold_driver_start():
    from trtkit.gpucheck import plan
    from trtkit.gpucheck.run import DEFAULT_BUDGET_SECONDS
    device = plan.get_step("device")
    cold = plan.COLD_START_SECONDS_PER_GPU * plan.COLD_START_GPUS
    assert device.floor == pytest.approx(cold + plan.DEVICE_WARM_SECONDS)
    # the plan's own timing model gives it that much, first in a plan where every step runs
    every = plan.make_plan({"gpu": {"name": "RTX", "compute_capability": "8.9", "count": 8},
                            "modules": dict((m, True) for m in plan.MODULES), "import_errors": {}, "versions": {},
                            "torch_cuda": True, "torch_compile": True, "ort_providers": ["CUDAExecutionProvider"],
                            "rtx_targets": ["8.9"]})
    assert all(p.run for p in every) and every[0].name == "device"
    seconds, why = plan.allot(device, DEFAULT_BUDGET_SECONDS, [p.step for p in every[1:]])
    assert why is None and seconds >= cold + plan.DEVICE_WARM_SECONDS
    # and the whole plan's floors still fit the default budget, all but the last step's (detection: it takes what
    # the others leave, and is skipped with its reason when that is less than its floor)
    assert every[-1].name == "detection"
    assert sum(p.step.floor for p in every[:-1]) + plan.MARGIN_SECONDS <= DEFAULT_BUDGET_SECONDS
    # on a GPU without TensorRT (the H200 the check ran on) every floor fits, detection's included
    h200 = plan.make_plan({"gpu": {"name": "NVIDIA H200", "compute_capability": "9.0", "count": 1},
                           "modules": dict((m, m not in ("tensorrt", "tensorrt_rtx", "tensorrt_rtx_bindings",
                                                         "torch2trt")) for m in plan.MODULES),
                           "import_errors": {}, "versions": {}, "torch_cuda": True, "torch_compile": True,
                           "ort_providers": ["CUDAExecutionProvider"], "rtx_targets": None})
    assert [p.name for p in h200 if p.run][-1] == "detection"
    assert sum(p.step.floor for p in h200 if p.run) + plan.MARGIN_SECONDS <= DEFAULT_BUDGET_SECONDS
    # derived, not fixed: a slower cold start moves the budget by exactly its cost
    slower = plan.device_step(per_gpu=2 * plan.COLD_START_SECONDS_PER_GPU)
    assert slower.floor == pytest.approx(device.floor + cold)
    assert plan.allot(slower, DEFAULT_BUDGET_SECONDS + cold, [p.step for p in every[1:]])[0] >= slower.floor
