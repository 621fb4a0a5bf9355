"""The one interface every backend implements (metal, cuda, sim).

A backend turns a `KernelSpec` (what `mx.fast.metal_kernel` / `cuda_kernel`
take at construction) into a callable with MLX's call signature. Host
pipelines in tasks/ only ever talk to this interface, so the same pipeline
runs on an Apple GPU, an NVIDIA GPU and the CPU simulator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mlxsci.kernel.spec import BackendError, KernelSpec


@dataclass
class BranchMap:
    """A kernel's branch arms as a backend that measures coverage counts
    them: `arms`, {"line", "column", "kind", "counter"} each (line and column
    in the candidate file; counter: the index in Kernel.branch_hits()),
    `not_instrumented`, {"line", "column", "kind", "reason"} each, and
    `counters`, the length of Kernel.branch_hits()."""

    arms: list[dict] = field(default_factory=list)
    not_instrumented: list[dict] = field(default_factory=list)
    counters: int = 0


@dataclass(frozen=True)
class RunMode:
    """How the launches of one pipeline run run, handed to each kernel call
    (never set on the backend): outputs filled with `init_value` first (the
    verification runs' poison); the order threads run in (`order`: a name
    of Backend.other_orders', None the backend's own; a shuffled order from
    `order_seed`, one step on per launch: `launch` is the launch's index in
    its run, which the Launcher counts); threadgroup memory filled with
    `tg_fill` (None: the backend's poison); the branch-counting variants
    (`count_branches`); the simulator's bounds-checked variants
    (`check_bounds`: mlxsci/backends/sim/bounds.py). A backend uses what it
    can (a GPU: init_value)."""

    init_value: float | None = None
    order: str | None = None
    order_seed: int = 0
    launch: int = 0
    tg_fill: int | None = None
    count_branches: bool = False
    check_bounds: bool = False


class BuildService(Protocol):
    """The parent's side of a sandboxed worker's kernel builds
    (Backend.build_service): how many a size may ask for, how large a
    request may be, and the reply to one, read as hostile."""

    max_builds_per_size: int
    max_request_bytes: int

    def serve(self, request: bytes, job, deadline: float | None) -> dict: ...


class Kernel:
    """A built kernel. Call it exactly like an MLX custom kernel object."""

    def __call__(
        self,
        *,
        inputs,
        output_shapes,
        output_dtypes,
        grid,
        threadgroup,
        template=None,
        init_value=None,
        mode: RunMode | None = None,
    ):
        """Returns a list of mx.array outputs (lazy on GPU backends). `mode`:
        how this run's launches run (RunMode), where the backend can."""
        raise NotImplementedError

    def branch_hits(self) -> list[int] | None:
        """Where the backend measures coverage (Backend.measures_coverage):
        how often each counter of the kernel's arms (Backend.branch_map) was
        bumped by the launches made while `count_branches` was on; None
        where it does not."""
        return None


class Backend:
    """A place kernels run. Subclasses set `name` and `dialect`; `eager` says
    whether a kernel call runs the kernel at once (the simulator) rather than
    queueing lazy work that runs at mx.eval (MLX on a GPU).

    The rest of mlxsci never asks which backend it has, only what the backend
    does: the attributes and class methods below, answered by the class (so
    also before one is built: `mlxsci.backends.backend_class(name).<answer>`).
    Their defaults are a GPU's answers; the simulator gives its own
    (mlxsci/backends/sim/__init__.py)."""

    name: str = ""
    dialect: str = "metal"
    eager: bool = False
    # The candidate's kernels run as native code in the process that launches
    # them, not on a device apart: the evaluation runs its worker in the OS
    # sandbox (mlxsci.sandbox) and works out what it can from the outputs the
    # worker sends back rather than take its word (job "every_output");
    # mlxsci.kernel_function refuses a model-written candidate unless trusted.
    runs_candidate_natively: bool = False
    # The verification runs once more with the threads in other orders (the
    # simulator's schedules; a GPU gives no control of its order), so that a
    # race shows as a difference (job "schedule_seeds").
    reorders_threads: bool = False
    # MLX's own operations run here and its timer sees them (not on the
    # simulator, which runs only custom kernels): the roofline measures MLX's
    # copy as a reference.
    runs_mlx_ops: bool = True
    # Launches record their modeled device time in `activity` while the sim
    # timer listens (mlxsci.timing.timers.SimTimer).
    records_launch_time: bool = False
    # The size set an evaluation takes when none is asked for: in-dist on a
    # GPU, smoke where a size costs minutes.
    default_size_set: str = "in-dist"
    # It can count how often each arm of a candidate's branches runs
    # (branch_map, Kernel.branch_hits): the simulator instruments the text
    # it compiles; a GPU runs the compiled kernel as it is.
    measures_coverage: bool = False
    # Set by the worker for its coverage run: kernels launched meanwhile
    # count their arms (on a backend that measures coverage).
    count_branches: bool = False
    # Threadgroup memory holds poison (NaN) before each group, and another
    # byte while `tg_fill` is set (the simulator): the worker's run that
    # tells whether a kernel read it before writing it
    # (mlxsci.worker.serve.unwritten_threadgroup_run). A GPU's is what it is.
    poisons_threadgroup_memory: bool = False
    tg_fill: int | None = None
    # It can build kernels that check each index into an array of known
    # bound (the simulator: mlxsci/backends/sim/bounds.py), for the worker's
    # bounds run (mlxsci.worker.serve.bounds_run). A GPU has no such build.
    checks_array_bounds: bool = False

    @classmethod
    def available(cls) -> bool:
        raise NotImplementedError

    @classmethod
    def check_machine(cls) -> None:
        """Raise EnvironmentFault (mlxsci.storage.faults) saying what this
        machine lacks to run the backend beyond its Python packages, so a
        command says so before it starts; a GPU backend needs nothing more."""

    @classmethod
    def dialect_options(cls, dialect: str) -> dict:
        """The options (keyword arguments of the class) that make this backend
        run `dialect`; ValueError for a dialect it cannot run. A GPU backend
        runs one dialect, its own."""
        if dialect != cls.dialect:
            raise ValueError(f"the {cls.name} backend runs {cls.dialect} kernels, not {dialect}")
        return {}

    @classmethod
    def gpu_options(cls, gpu: str | None) -> dict:
        """The options (keyword arguments of the class) that make this backend
        model the GPU named `gpu` (--sim-gpu, the API's sim_gpu; None: no
        name given); ValueError for a name it cannot model. A GPU backend
        times the GPU it runs on, so it takes no name."""
        if gpu is not None:
            raise ValueError(
                f"--sim-gpu {gpu} names a GPU for the simulator to model, and the {cls.name} "
                "backend times the GPU it runs on: use --backend sim, or leave out --sim-gpu"
            )
        return {}

    @classmethod
    def modelled_gpu(cls, dialect: str, gpu: str | None) -> str | None:
        """The GPU whose modelled clock times this backend's kernels in
        `dialect` when `gpu` is named (gpu_options), its name; None where a
        GPU's own clock times them."""
        return None

    def seed_timing(self, seed: int | None) -> None:
        """Where the backend's timer draws at random (the simulator: which
        launches and groups its modelled clock profiles), draw from `seed`,
        the evaluation's secret one; None: fresh randomness. A GPU's timer
        draws nothing."""
        return None

    def modelled_ceilings(self) -> dict | None:
        """The ceilings of the GPU this backend's clock models, from its
        parameters ({"gpu", "bandwidth": [[working-set bytes, GB/s], ...],
        "peak_gflops", "dram_gbs"}), or None where the roofline is measured on
        the machine (a GPU backend)."""
        return None

    @classmethod
    def sandbox_reads(cls) -> list[str]:
        """The folders the sandboxed worker of a candidate running natively
        reads beyond Python's, MLX's, mlxsci's and the task's own."""
        return []

    def prepare_machine(self, announce=None) -> None:
        """Build what this backend needs once per machine before evaluations
        start, telling `announce` (a callable taking a line) when such work
        starts; nothing on a GPU."""

    def device_info(self) -> dict:
        """At least {"name": str, "fingerprint": str}; the fingerprint keys the
        roofline cache, so it must change when the hardware or runtime does
        (or the GPU a backend models: then also "sim_gpu", its name)."""
        raise NotImplementedError

    def kernel(self, spec: KernelSpec) -> Kernel:
        raise NotImplementedError

    def to_device(self, array):
        """A numpy array -> an mx.array ready for timed use on this backend."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Wait for all queued work (a no-op where calls are eager)."""

    def take_undefined_reads(self) -> dict | None:
        """The reads the language leaves undefined that the launches since the
        last call made (mlxsci.protocol.undefined_reads), counting afresh;
        None where none were seen or the backend cannot see them (a GPU)."""
        return None

    def branch_map(self, spec: KernelSpec) -> BranchMap | None:
        """The arms of `spec`'s branches that its counters count, and those
        left out, where the backend measures coverage; None where not. The
        parent asks it (never the worker), from its own spec of the kernel."""
        return None

    # The order the verified run's threads run in, by name, where the backend
    # chooses it (the simulator); None on a GPU, whose order is its own.
    own_order: str | None = None

    def other_orders(self, seeds, lockstep: bool = False) -> list[tuple[str, int | None, RunMode]]:
        """The verification run's other thread orders, each (its name, its
        seed or None, the RunMode that runs it), one shuffled order per seed
        in `seeds`, and with `lockstep` the lock-step run where the backend
        has one (has_lockstep_order): a result that changes with the order is
        a race. None on a GPU, which gives no control of its order."""
        return []

    @classmethod
    def has_lockstep_order(cls) -> bool:
        """Whether other_orders can run a simdgroup's lanes in lock-step with
        the race detector on (the simulator, where the host builds its
        profiled variant); the parent plans that run from this."""
        return False

    @classmethod
    def build_service(cls) -> BuildService | None:
        """Where a sandboxed worker may not compile (the simulator, whose
        candidate code runs natively), the parent's service that builds the
        kernels it asks for; None where the worker builds its own (a GPU)."""
        return None

    @classmethod
    def use_parent_builds(cls, ask: Callable[[dict], dict] | None) -> None:
        """In a sandboxed worker: have kernel builds asked of the parent
        through `ask` (a request in, the parent's reply out); None: build
        here again. A backend whose worker builds its own ignores it."""

    @classmethod
    def run_launch(cls, job, outdir) -> dict:
        """One launch of one kernel (mlxsci.protocol.jobs.LaunchJob, for
        mlxsci.fast's isolated calls), in the worker; its result."""
        raise NotImplementedError(f"the {cls.name} backend runs no isolated launches")

    def classify_error(self, exc: BaseException) -> BackendError | None:
        """Map an exception raised while evaluating kernel outputs to a
        CompileError or KernelFault, or None when it is not the kernel's fault."""
        if isinstance(exc, BackendError):
            return exc
        return None
