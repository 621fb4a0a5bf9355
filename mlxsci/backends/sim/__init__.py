"""`sim`: run MLX custom-kernel bodies on the CPU.

For every call the simulator generates the exact text MLX would compile
(mlxsci.kernel.signature), rewrites it line for line into C++, compiles it together
with a language prelude and the fiber runtime (runtime/), and runs the kernel
with the dialect's dispatch semantics, one fiber per GPU thread when the
kernel uses barriers or SIMD-group/warp functions, SIMD width 32:

- "metal" (mx.fast.metal_kernel): exactly `grid` threads, threadgroups
  clamped to the grid with partial edge groups; runtime/metal_prelude.h.
- "cuda" (mx.fast.cuda_kernel): whole blocks, block = min(threadgroup, grid),
  ceil(grid / threadgroup) blocks, so threads beyond the grid run too;
  runtime/cuda_prelude.h plus stub headers under runtime/include/ for the
  generated `#include`s. Dynamic shared memory (`extern __shared__`) uses
  `spec.shared_memory` bytes when the KernelSpec has such a field.

Every input and output lives in its own mapping with PROT_NONE guard pages on
both sides; placement alternates per launch between end-aligned (catches
overflow) and start-aligned (catches underflow). Faults, barrier divergence,
deadlock and timeouts come back as KernelFault; the Python caller lives on.

The launch path is kept cheap (issue 11: ~0.1-0.3 ms of host work per small
launch, 1-2 ms before): mappings are reused across launches (BufferPool; only
after a clean launch, data bytes rewritten every time), generated text and
launch checks are cached per call signature and launch shape.

Modules: abi (ctypes mirrors of the runtime's structures, libc), buffers
(guarded buffers, the pool, data bytes), dialects (generated text, regions,
glue, launch semantics per dialect), faults (runtime result -> KernelFault),
kernel (SimKernel: variants and launches); this module holds SimBackend and
re-exports the names other modules and tests use.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import platform
import random

from mlxsci.backends.base import Backend, BranchMap, RunMode
from mlxsci.backends.sim import coverage, gpus, profile, toolchain, variants
from mlxsci.backends.sim.abi import FORWARD_SCHEDULE, REVERSED_SCHEDULE
from mlxsci.backends.sim.buffers import GARBAGE_BYTE, PAGE, POOL, BufferPool
from mlxsci.backends.sim.dialects import DIALECTS
from mlxsci.backends.sim.kernel import SimKernel
from mlxsci.kernel.spec import KernelSpec
from mlxsci.storage.faults import EnvironmentFault

__all__ = [
    "SimBackend",
    "SimKernel",
    # what tests reach into (tests/backends/sim/test_sim_launch_reuse.py, test_sim_language_rules.py)
    "GARBAGE_BYTE",
    "PAGE",
    "BufferPool",
    "POOL",
    "DIALECTS",
]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


# ------------------------------------------------------------------ the backend
class SimBackend(Backend):
    name = "sim"
    eager = True  # a kernel call runs the kernel before it returns
    # What the protocol asks of a backend (mlxsci.backends.base.Backend), the
    # simulator's answers: a kernel is native code in the launching process;
    # its threads run in an order it chooses (self.schedule), so the
    # verification runs again in others; a thousand times slower than a GPU,
    # it takes fewer runs, smaller probes and the smoke sizes; it runs only
    # custom kernels, and clocks each launch itself.
    runs_candidate_natively = True
    reorders_threads = True
    runs_mlx_ops = False
    records_launch_time = True
    default_size_set = "smoke"
    # It compiles the candidate's text itself, so it can count its branch
    # arms (coverage.py) in a variant built for that.
    measures_coverage = True
    # Its runtime refills threadgroup memory before each group, with poison
    # unless tg_fill says otherwise (runtime/sim_runtime.cpp, __sim_tg_fill).
    poisons_threadgroup_memory = True
    # Its kernels can be built with the compiler's array-bounds check (bounds.py).
    checks_array_bounds = True

    def __init__(
        self,
        dialect: str = "metal",
        launch_timeout_s: float = 60.0,
        stack_size: int = 128 * 1024,
        force_fibers: bool | None = None,
        sim_gpu: str | None = None,
    ):
        if dialect not in DIALECTS:
            raise ValueError(f"unknown dialect {dialect!r}")
        self.dialect = dialect
        # The GPU whose clock the simulator models (gpus/: --sim-gpu, else the
        # dialect's default); UnknownGpu (a ValueError) names the choices.
        self.gpu = gpus.load(self.modelled_gpu(dialect, sim_gpu))
        self.sim_dialect = DIALECTS[dialect]()
        self.launch_timeout_s = launch_timeout_s
        self.stack_size = int(stack_size)
        if force_fibers is None:
            force_fibers = os.environ.get("MLXSCI_SIM_FIBERS", "") not in ("", "0")
        self.force_fibers = bool(force_fibers)
        # The order threads run in (runtime/sim_runtime.h, __SIM_SCHEDULE_*): 0 in order,
        # 1 reversed, 2 shuffled from schedule_seed (which moves on one step per
        # launch: abi.next_schedule_seed). The worker verifies once more under
        # the other orders to expose races (mlxsci.worker.serve.run_schedules).
        self.schedule = int(os.environ.get("MLXSCI_SIM_SCHEDULE", "0") or 0)
        self.schedule_seed = 0
        # (kernel name, modeled seconds, host CPU seconds) of every launch while
        # the sim timer records (mlxsci.timing.timers.SimTimer); None when nobody listens.
        self.activity: list | None = None
        # While the sim timer times with the modelled GPU: its launches' modelled
        # seconds by kind (kernel.py: _timing_of).
        self.launch_models: dict | None = None
        # The counts and bounds of each kernel's last profiled launch (the sim
        # timer reports them: timer_info["launches"]).
        self.model_parts: dict | None = None
        # The host-time clock instead of the modelled GPU's: where the host
        # cannot build a profiled variant (profile.supported), or asked for
        # with MLXSCI_SIM_CLOCK=host (docs/simulator-time.md: the fallback,
        # its roofline measured by probes on the host like a GPU's).
        self.host_clock = (
            os.environ.get("MLXSCI_SIM_CLOCK", "") == "host" or not profile.supported()
        )
        # The draws of the modelled clock (seed_timing).
        self.profile_rng: random.Random = random.SystemRandom()
        self.extra_defines: tuple[str, ...] = ()
        # The byte an output without init_value is filled with before a
        # launch (buffers.fill_output): another byte in a second run tells
        # the elements no thread wrote (mlxsci.fast's checks).
        self.output_garbage = GARBAGE_BYTE
        # Where launches place each buffer in its guarded mapping: None
        # alternates per launch (end-aligned catches overruns, start-aligned
        # underruns); "end" or "start" fixes it (mlxsci.fast's checked runs).
        self.placement: str | None = None
        # A kernel's writes to its inputs: copied back to the caller (a GPU's
        # behaviour), or, True, a KernelFault("input_write") (mlxsci.fast).
        self.refuse_input_writes = False
        # Kernels launched while this is on use their counted variants (the
        # worker's coverage run: mlxsci.worker.serve.coverage_run).
        self.count_branches = False
        # Opt-in diagnostics, made by the profiled variant's hooks (profile.py:
        # Checks says what they see; they do nothing where profile.supported()
        # is False, nor in the worker's coverage run). check_threadgroup_reads:
        # a launch of a kernel with threadgroup/__shared__ memory raises
        # KernelFault("uninitialized_read") at the first load of bytes no
        # thread of the group stored since the group began. watch_writes:
        # (input or output name, flat element index): each launch records the
        # stores to that element, group and thread in the order they ran, in
        # watched_writes (the first profile.WATCH_CAP) and watched_write_count.
        # check_device_bounds: the first load or store of an input's or
        # output's bytes outside its data (the alignment slack and page
        # padding inside its mapping, where nothing faults) raises the
        # KernelFault("out_of_bounds") its guard pages would. check_output_reads:
        # in a call without init_value, a load of an output element no store
        # had touched, which no thread but the reader stores to later in the
        # launch either (else a race, for the schedules), raises
        # KernelFault("uninitialized_read") naming the output, element and
        # reader, when the launch has run.
        self.check_threadgroup_reads = False
        self.check_device_bounds = False
        self.check_output_reads = False
        # check_device_races: the first data race on an input's or output's
        # element (two threads' stores, neither atomic, no barrier or SIMD
        # operation between them, the later one changing the element)
        # raises KernelFault("race") naming the buffer, element and threads
        # (runtime/sim_race.inc). The worker's lock-step verification run
        # checks it whatever this says (other_orders).
        self.check_device_races = False
        self.watch_writes: tuple[str, int] | None = None
        self.watched_writes: list[dict] = []
        self.watched_write_count = 0
        # The reads the language leaves undefined (a shuffle from an inactive
        # lane: mlxsci.protocol.undefined_reads) of every launch since the
        # last take_undefined_reads(): their count and the first one.
        self.undefined_reads: dict | None = None
        if os.environ.get("MLXSCI_SIM_UCONTEXT", "") not in ("", "0"):
            self.extra_defines = ("-DSIM_FIBER_UCONTEXT=1",)

    @classmethod
    def available(cls) -> bool:
        try:
            toolchain.zig_executable()
            importlib.import_module("mlx.core")
        except Exception:
            return False
        return True

    @classmethod
    def check_machine(cls) -> None:
        """Its one requirement the machine may lack: the compiler."""
        try:
            toolchain.zig_executable()
        except EnvironmentFault as exc:
            raise EnvironmentFault(f"the simulator cannot run here: {exc}") from exc

    @classmethod
    def dialect_options(cls, dialect: str) -> dict:
        """The simulator runs either dialect, the one it is built for."""
        return {"dialect": dialect}

    @classmethod
    def gpu_options(cls, gpu: str | None) -> dict:
        """It models any GPU of gpus/: the name, checked (UnknownGpu, a
        ValueError listing the choices), travels to the worker with the job's
        backend options; None leaves the dialect's default."""
        if gpu is None:
            return {}
        gpus.load(gpu)
        return {"sim_gpu": gpu}

    @classmethod
    def modelled_gpu(cls, dialect: str, gpu: str | None) -> str | None:
        return gpu or gpus.default_for(dialect)

    @classmethod
    def sandbox_reads(cls) -> list[str]:
        """The kernel cache: the libraries the parent builds for the worker."""
        return [str(toolchain.cache_dir())]

    @property
    def own_order(self) -> str | None:  # type: ignore[override]  # a property of the instance
        return {FORWARD_SCHEDULE: "forward", REVERSED_SCHEDULE: "reversed"}.get(self.schedule)

    @classmethod
    def has_lockstep_order(cls) -> bool:
        """Where the host builds the profiled variant, whose hooks switch
        the lanes and run the race detector (profile.supported)."""
        return profile.supported()

    def other_orders(self, seeds, lockstep: bool = False) -> list[tuple[str, int | None, RunMode]]:
        """Reversed (forward where MLXSCI_SIM_SCHEDULE made reversed this
        backend's own), then one shuffled order per seed: groups and threads
        in orders drawn from it, simdgroups interleaved at random around
        barriers and SIMD operations (runtime/sim_runtime.h); then, with
        `lockstep` where the host builds the profiled variant
        (has_lockstep_order), lock-step: each simdgroup's lanes take turns at
        every device-memory access, as a GPU's do, with the race detector on
        (runtime/sim_race.inc)."""
        other = "forward" if self.schedule == REVERSED_SCHEDULE else "reversed"
        shuffled = [("shuffled", s, RunMode(order="shuffled", order_seed=s)) for s in seeds]
        turns = [("lockstep", None, RunMode(order="lockstep"))]
        return [
            (other, None, RunMode(order=other)),
            *shuffled,
            *(turns if lockstep and self.has_lockstep_order() else []),
        ]

    @classmethod
    def build_service(cls) -> variants.BuildRequests:
        return variants.BuildRequests()

    @classmethod
    def use_parent_builds(cls, ask) -> None:
        variants.REMOTE = None if ask is None else (lambda req: variants.raise_reply(ask(req)))

    @classmethod
    def run_launch(cls, job, outdir) -> dict:
        from mlxsci.backends.sim import launch_job  # it builds SimBackends of its own

        return launch_job.run_launch(job, outdir)

    def prepare_machine(self, announce=None) -> None:
        """The compiler's one-off set-up (toolchain.prepare_toolchain)."""
        toolchain.prepare_toolchain(announce)

    def device_info(self) -> dict:
        """The host, and the GPU modelled: its name and parameters are in the
        fingerprint, so no roofline of one GPU is ever reused for another
        (nor for the same one with other parameters)."""
        cpu = _cpu_model()
        h = hashlib.sha256()
        h.update(cpu.encode())
        h.update(toolchain.runtime_digest().encode())
        h.update(self.gpu.name.encode())
        h.update(json.dumps(self.gpu.parameters(), sort_keys=True).encode())
        if self.host_clock:
            h.update(b"host clock")
            return {
                "name": f"CPU simulator ({cpu}), host-time clock",
                "fingerprint": h.hexdigest()[:16],
                "sim_gpu": self.gpu.name,
            }
        return {
            "name": f"CPU simulator ({cpu}) modelling {self.gpu.name}",
            "fingerprint": h.hexdigest()[:16],
            "sim_gpu": self.gpu.name,
        }

    def seed_timing(self, seed: int | None) -> None:
        """Which launches a timed size profiles beyond each kind's first, and
        which groups of a large launch are analysed in full (kernel.py), drawn
        from `seed`: the evaluation's secret input seed, so the candidate
        cannot predict them, and replaying the seed replays the draw."""
        self.profile_rng = random.Random(seed) if seed is not None else random.SystemRandom()

    def modelled_ceilings(self) -> dict | None:
        """The modelled GPU's ceilings, from its parameters: its last-level
        cache's bandwidth for working sets that fit in it, its DRAM's beyond
        (what probes on that GPU would measure after a warm-up), and its FP32
        peak. Nothing is measured on the host: host time no longer enters a
        score (docs/simulator-time.md)."""
        if self.host_clock:
            return None  # the host-time clock: its roofline is measured, as a GPU's
        gpu = self.gpu
        llc = float(gpu.llc_bytes)
        cache = max(gpu.llc_gbs, gpu.dram_gbs)
        return {
            "gpu": gpu.name,
            # A warm working set is served at least as fast as DRAM serves a cold one.
            "bandwidth": [[1024.0, cache], [llc, cache], [2 * llc, gpu.dram_gbs]],
            "peak_gflops": gpu.flops_per_second / 1e9,
            "dram_gbs": gpu.dram_gbs,
        }

    def kernel(self, spec: KernelSpec) -> SimKernel:
        if spec.dialect != self.dialect:
            raise ValueError(
                f"kernel dialect {spec.dialect!r} does not match backend dialect {self.dialect!r}"
            )
        return SimKernel(self, spec)

    def take_undefined_reads(self) -> dict | None:
        """The undefined reads of the launches since the last call (the
        worker calls it around the verified run), and start counting afresh."""
        seen, self.undefined_reads = self.undefined_reads, None
        return seen

    def branch_map(self, spec: KernelSpec) -> BranchMap:
        """The arms the counted variant of `spec` counts (coverage.arms_of)."""
        arms, skipped = coverage.arms_of(spec)
        return BranchMap(arms, skipped, coverage.counters_of(spec))

    def to_device(self, array):
        import mlx.core as mx

        return mx.array(array)

    def synchronize(self) -> None:
        return None
