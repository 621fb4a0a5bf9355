"""Metal-Sci's kernel interfaces for the 12 tasks, as data (spec
metal-sci-tasks.md, each task's "Kernel interface" and "Dispatch").

Per kernel: the buffers by index (Metal-Sci's names, which mlxsci keeps), how
each is used (`in`, `out`, `inout` = read-modify-write in place, `scalar`),
the type Metal-Sci declares, and the launch the Metal-Sci host uses, as a
rule the converter turns into mlxsci launch expressions. A kernel mlxsci does
not run (`runs=False`: lj_clear_cells; mlxsci zeroes cell_count with the
contract's init_value) is still listed: a Metal-Sci source must define it.

mlxsci's names for a buffer: an `in` or `scalar` buffer X is mlxsci's input X,
an `out` buffer X its output X, an `inout` buffer X the output X_out that
starts as a copy of the input X (`//! inplace X_out = X`: the kernel reads
and writes it as Metal-Sci's kernel did its buffer).

Launch rules (spec section 0.4): the host picks the threadgroup; only a
pipeline whose maxTotalThreadsPerThreadgroup is smaller (a
`[[max_total_threads_per_threadgroup(N)]]` attribute) shrinks it:
  line      1-D, TG = min(N, width), grid = extent rounded up to TG
  plane     TG (16, h), h halved from 16 until 16*h <= N, grid rounded up
  box       TG (8, 8, 4), halve z, then y, then x until it fits, grid rounded up
  reduce    a single threadgroup: width = largest power of two <= min(256, N), grid = TG
  fixed     grid and TG fixed by the host (fft3d, adi3d), no shrinking:
            the host refuses a pipeline whose maximum is below `min_threads`
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Buffer",
    "Launch",
    "KernelInterface",
    "TaskInterface",
    "INTERFACES",
    "interface",
    "launch_shape",
    "LaunchRuleError",
]

BUFFER_KINDS = ("in", "out", "inout", "scalar")


@dataclass(frozen=True)
class Buffer:
    index: int
    name: str
    kind: str  # one of BUFFER_KINDS
    metal_type: str  # as Metal-Sci declares it (documentation, and the notes)

    @property
    def read_name(self) -> str | None:
        """mlxsci's input that holds this buffer's values (None: an output only)."""
        return None if self.kind == "out" else self.name

    @property
    def write_name(self) -> str | None:
        """mlxsci's output this buffer's writes go to (None: read-only)."""
        if self.kind == "out":
            return self.name
        if self.kind == "inout":
            return self.name + "_out"
        return None


@dataclass(frozen=True)
class Launch:
    """The Metal-Sci host's launch of one kernel. rule: line, plane, box,
    reduce or fixed (module docstring). extent: the size expressions the
    grid covers, one per grid dimension used. width: the default 1-D
    threadgroup width (line, reduce). grid/threadgroup: the expressions of
    a fixed launch. min_threads: below this pipeline maximum the host refuses."""

    rule: str
    extent: tuple[str, ...] = ()
    width: int = 0
    grid: str = ""
    threadgroup: str = ""
    min_threads: str = ""


@dataclass(frozen=True)
class KernelInterface:
    name: str
    buffers: tuple[Buffer, ...]
    launch: Launch
    runs: bool = True
    why_not_run: str = ""

    def buffer(self, index: int) -> Buffer | None:
        for b in self.buffers:
            if b.index == index:
                return b
        return None


@dataclass(frozen=True)
class TaskInterface:
    task: str
    kernels: tuple[KernelInterface, ...]

    def kernel(self, name: str) -> KernelInterface | None:
        for k in self.kernels:
            if k.name == name:
                return k
        return None


def _b(index: int, name: str, kind: str, metal_type: str) -> Buffer:
    return Buffer(index, name, kind, metal_type)


def _line(extent: str, width: int) -> Launch:
    return Launch("line", (extent,), width)


_PLANE_XY = Launch("plane", ("NX", "NY"))
_U32 = "constant uint&"
_F32 = "constant float&"
_IN = "device const float*"
_OUT = "device float*"

_ADI_BUFFERS = (
    _b(0, "u_in", "in", _IN),
    _b(1, "u_out", "out", _OUT),
    _b(2, "NX", "scalar", _U32),
    _b(3, "NY", "scalar", _U32),
    _b(4, "NZ", "scalar", _U32),
    _b(5, "mu", "scalar", _F32),
)
_FFT_BUFFERS = (
    _b(0, "in_data", "in", "device const float2*"),
    _b(1, "out_data", "out", "device float2*"),
    _b(2, "N", "scalar", _U32),
)
_FFT_LAUNCH = Launch("fixed", grid="(N, N * N, 1)", threadgroup="(N, 1, 1)", min_threads="N")


def _adi(name: str, grid: str) -> KernelInterface:
    return KernelInterface(
        name,
        _ADI_BUFFERS,
        Launch("fixed", grid=grid, threadgroup="(32, 1, 1)", min_threads="32"),
    )


INTERFACES: dict[str, TaskInterface] = {
    t.task: t
    for t in (
        TaskInterface(
            "saxpy",
            (
                KernelInterface(
                    "saxpy",
                    (
                        _b(0, "x", "in", _IN),
                        _b(1, "y", "inout", _OUT),
                        _b(2, "a", "scalar", _F32),
                        _b(3, "N", "scalar", _U32),
                    ),
                    _line("N", 256),
                ),
            ),
        ),
        TaskInterface(
            "heat2d",
            (
                KernelInterface(
                    "heat_step",
                    (
                        _b(0, "u_in", "in", _IN),
                        _b(1, "u_out", "out", _OUT),
                        _b(2, "NX", "scalar", _U32),
                        _b(3, "NY", "scalar", _U32),
                        _b(4, "alpha", "scalar", _F32),
                    ),
                    _PLANE_XY,
                ),
            ),
        ),
        TaskInterface(
            "wave3d",
            (
                KernelInterface(
                    "wave_step",
                    (
                        _b(0, "u_prev", "in", _IN),
                        _b(1, "u_curr", "in", _IN),
                        _b(2, "u_next", "out", _OUT),
                        _b(3, "NX", "scalar", _U32),
                        _b(4, "NY", "scalar", _U32),
                        _b(5, "NZ", "scalar", _U32),
                        _b(6, "alpha", "scalar", _F32),
                    ),
                    Launch("box", ("NX", "NY", "NZ")),
                ),
            ),
        ),
        TaskInterface(
            "nbody",
            (
                KernelInterface(
                    "nbody_step",
                    (
                        _b(0, "pos_in", "in", "device const float4*"),
                        _b(1, "pos_out", "out", "device float4*"),
                        _b(2, "vel_in", "in", "device const float4*"),
                        _b(3, "vel_out", "out", "device float4*"),
                        _b(4, "mass", "in", _IN),
                        _b(5, "N", "scalar", _U32),
                        _b(6, "dt", "scalar", _F32),
                        _b(7, "eps", "scalar", _F32),
                        _b(8, "G", "scalar", _F32),
                    ),
                    _line("N", 128),
                ),
            ),
        ),
        TaskInterface(
            "hmc",
            (
                KernelInterface(
                    "hmc_step",
                    (
                        _b(0, "q_in", "in", _IN),
                        _b(1, "q_out", "out", _OUT),
                        _b(2, "accept_cnt", "inout", "device uint*"),
                        _b(3, "A", "in", _IN),
                        _b(4, "K", "scalar", _U32),
                        _b(5, "d", "scalar", _U32),
                        _b(6, "L", "scalar", _U32),
                        _b(7, "eps", "scalar", _F32),
                        _b(8, "hmc_step_idx", "scalar", _U32),
                        _b(9, "seed", "scalar", _U32),
                    ),
                    _line("K", 64),
                ),
            ),
        ),
        TaskInterface(
            "lbm",
            (
                KernelInterface(
                    "lbm_step",
                    (
                        _b(0, "f_in", "in", _IN),
                        _b(1, "f_out", "out", _OUT),
                        _b(2, "NX", "scalar", _U32),
                        _b(3, "NY", "scalar", _U32),
                        _b(4, "tau", "scalar", _F32),
                    ),
                    _PLANE_XY,
                ),
            ),
        ),
        TaskInterface(
            "ising",
            (
                KernelInterface(
                    "ising_step",
                    (
                        _b(0, "spins", "inout", "device char*"),
                        _b(1, "p_accept", "in", _IN),
                        _b(2, "NX", "scalar", _U32),
                        _b(3, "NY", "scalar", _U32),
                        _b(4, "step_idx", "scalar", _U32),
                        _b(5, "seed", "scalar", _U32),
                    ),
                    _PLANE_XY,
                ),
            ),
        ),
        TaskInterface(
            "lj",
            (
                KernelInterface(
                    "lj_clear_cells",
                    (
                        _b(0, "cell_count", "out", "device atomic_uint*"),
                        _b(1, "M3", "scalar", _U32),
                    ),
                    _line("M3", 64),
                    runs=False,
                    why_not_run="mlxsci starts cell_count at 0 (the contract's init_value), "
                    "so it has no clear kernel",
                ),
                KernelInterface(
                    "lj_build_cells",
                    (
                        _b(0, "pos", "in", "device const float4*"),
                        _b(1, "cell_count", "out", "device atomic_uint*"),
                        _b(2, "cell_list", "out", "device uint*"),
                        _b(3, "N", "scalar", _U32),
                        _b(4, "M", "scalar", _U32),
                        _b(5, "L", "scalar", _F32),
                        _b(6, "MAX_PER_CELL", "scalar", _U32),
                    ),
                    _line("N", 128),
                ),
                KernelInterface(
                    "lj_step",
                    (
                        _b(0, "pos_in", "in", "device const float4*"),
                        _b(1, "pos_out", "out", "device float4*"),
                        _b(2, "vel_in", "in", "device const float4*"),
                        _b(3, "vel_out", "out", "device float4*"),
                        _b(4, "cell_count", "in", "device const uint*"),
                        _b(5, "cell_list", "in", "device const uint*"),
                        _b(6, "N", "scalar", _U32),
                        _b(7, "M", "scalar", _U32),
                        _b(8, "L", "scalar", _F32),
                        _b(9, "rcut2", "scalar", _F32),
                        _b(10, "dt", "scalar", _F32),
                        _b(11, "MAX_PER_CELL", "scalar", _U32),
                    ),
                    _line("N", 128),
                ),
            ),
        ),
        TaskInterface(
            "gradshaf",
            (
                KernelInterface(
                    "gradshaf_axis_reduce",
                    (
                        _b(0, "psi", "in", _IN),
                        _b(1, "psi_axis", "out", _OUT),
                        _b(2, "NR", "scalar", _U32),
                        _b(3, "NZ", "scalar", _U32),
                    ),
                    Launch("reduce", width=256),
                ),
                KernelInterface(
                    "gradshaf_step",
                    (
                        _b(0, "psi_in", "in", _IN),
                        _b(1, "psi_out", "out", _OUT),
                        _b(2, "psi_axis", "in", _IN),
                        _b(3, "NR", "scalar", _U32),
                        _b(4, "NZ", "scalar", _U32),
                        _b(5, "Rmin", "scalar", _F32),
                        _b(6, "dR", "scalar", _F32),
                        _b(7, "dZ", "scalar", _F32),
                        _b(8, "p_axis", "scalar", _F32),
                        _b(9, "mu0", "scalar", _F32),
                        _b(10, "omega", "scalar", _F32),
                    ),
                    Launch("plane", ("NR", "NZ")),
                ),
            ),
        ),
        TaskInterface(
            "fft3d",
            tuple(
                KernelInterface(n, _FFT_BUFFERS, _FFT_LAUNCH)
                for n in ("fft3d_x", "fft3d_y", "fft3d_z")
            ),
        ),
        TaskInterface(
            "adi3d",
            (
                _adi("adi_x", "(NY, NZ, 1)"),
                _adi("adi_y", "(NX, NZ, 1)"),
                _adi("adi_z", "(NX, NY, 1)"),
            ),
        ),
        TaskInterface(
            "morton",
            (
                KernelInterface(
                    "morton_stencil",
                    (
                        _b(0, "u_in", "in", _IN),
                        _b(1, "u_out", "out", _OUT),
                        _b(2, "N", "scalar", _U32),
                        _b(3, "logN", "scalar", _U32),
                        _b(4, "alpha", "scalar", _F32),
                    ),
                    _line("N * N * N", 256),
                ),
            ),
        ),
    )
}


def interface(task_name: str) -> TaskInterface | None:
    return INTERFACES.get(task_name)


class LaunchRuleError(ValueError):
    """A pipeline maximum the Metal-Sci host would have refused."""


def _round_up(extent: str, tg: int) -> str:
    if tg == 1:
        return extent
    return f"ceil_div({extent}, {tg}) * {tg}"


def launch_shape(launch: Launch, max_threads: int | None = None) -> tuple[str, str]:
    """(grid, threadgroup) launch expressions of the Metal-Sci host's launch
    for a pipeline whose maximum threads per threadgroup is `max_threads`
    (None: no attribute, the host's defaults). Raises LaunchRuleError where
    the host would have refused the pipeline at every size."""
    cap = 1024 if max_threads is None else max_threads
    if cap < 1:
        raise LaunchRuleError(f"max_total_threads_per_threadgroup({cap}) is not a thread count")
    if launch.rule == "line":
        w = min(cap, launch.width)
        return f"({_round_up(launch.extent[0], w)}, 1, 1)", f"({w}, 1, 1)"
    if launch.rule == "plane":
        h = 16
        while 16 * h > cap and h > 1:
            h //= 2
        if 16 * h > cap:
            raise LaunchRuleError(
                f"Metal-Sci's host launches threadgroups 16 wide; a pipeline maximum of {cap} "
                "threads cannot hold one"
            )
        x, y = launch.extent
        return f"({_round_up(x, 16)}, {_round_up(y, h)}, 1)", f"(16, {h}, 1)"
    if launch.rule == "box":
        dims = [8, 8, 4]
        for axis in (2, 1, 0):
            while dims[0] * dims[1] * dims[2] > cap and dims[axis] > 1:
                dims[axis] //= 2
        x, y, z = launch.extent
        return (
            f"({_round_up(x, dims[0])}, {_round_up(y, dims[1])}, {_round_up(z, dims[2])})",
            f"({dims[0]}, {dims[1]}, {dims[2]})",
        )
    if launch.rule == "reduce":
        limit = min(launch.width, cap)
        w = 1
        while w * 2 <= limit:
            w *= 2
        return f"({w}, 1, 1)", f"({w}, 1, 1)"
    if launch.rule == "fixed":
        if max_threads is not None and launch.min_threads.isdigit():
            if cap < int(launch.min_threads):
                raise LaunchRuleError(
                    f"Metal-Sci's host needs threadgroups of {launch.min_threads} threads; "
                    f"max_total_threads_per_threadgroup({cap}) refuses them"
                )
        return launch.grid, launch.threadgroup
    raise LaunchRuleError(f"unknown launch rule {launch.rule!r}")
