"""How a worker makes a size's runs: the inputs on the device, one pipeline
run as the timers take it, the input sets the runs take in turn, and the
warm-up. mlxsci/worker/serve.py runs the protocol (timed runs, verification runs,
what the parent gets back) with these; they are apart because they are the
runs themselves, which the timers' tests and the time model's also build.
"""

from __future__ import annotations

import mlx.core as mx

from mlxsci.protocol.jobs import CompareJob, SizeJob
from mlxsci.protocol.outputs import input_checksums, outputs_digest, to_numpy
from mlxsci.timing.timers import Work, default_timer_name, make_timer


def pipeline_work(task, launcher, inputs: dict, params: dict, backend) -> Work:
    """One pipeline run of a candidate, as the timers take it."""

    def enqueue(inp: dict) -> dict:
        return task.run(launcher, inp, params)

    def wait(results) -> None:
        if results is not None:
            mx.eval(results)
        backend.synchronize()

    return Work(enqueue, inputs, wait, dict(task.chain), eager=backend.eager)


def device_inputs(task, params: dict, backend, seed: int | None = None) -> tuple[dict, dict]:
    """The size's inputs drawn from `seed` (Task.inputs), on the device (all of
    them, 0-d scalars included, made before anything is timed), and the
    checksums of the host originals."""
    host = task.inputs(params, seed)
    checksums = input_checksums(host)
    inputs = {k: backend.to_device(v) for k, v in host.items()}
    mx.eval(list(inputs.values()))
    return inputs, checksums


class Rotation:
    """The input sets a size's warm-up and timed runs take in turn: distinct
    buffers (other addresses) holding other data (other seeds), so a kernel
    that keeps what it computed for one input, or keys anything on a
    pointer, gains nothing. Keeps the results of the last run of each set:
    the parent checks them against that set's reference (job
    "input_seeds"; one set, the fixed inputs, when the job names none).
    With `digests` (the simulator, whose runs give the same bits every
    time), also a digest of every run's outputs, per set: the parent asks
    each to equal its set's checked run, so no run may do less work."""

    def __init__(self, work: Work, sets: list, digests: bool = False):
        self.work, self.sets = work, sets
        self.runs = 0
        self.last: list = [None] * len(sets)
        self.digests: list | None = [[] for _ in sets] if digests else None

    def time(self, timer):
        k = self.runs % len(self.sets)
        self.runs += 1
        self.work.inputs = self.sets[k]
        timing = timer.time(self.work)
        self.last[k] = timing.results
        if self.digests is not None:
            self.digests[k].append(outputs_digest(to_numpy(timing.results)))
        return timing


def job_timer(job: SizeJob | CompareJob, backend, task):
    """The timer the job asks for, else the backend's own (mlxsci.timing.timers)."""
    return make_timer(job.timer or default_timer_name(backend.name), backend, task.kernel_names)
