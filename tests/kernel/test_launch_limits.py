"""Launch limits (mlxsci.kernel.launch_limits): every backend refuses a launch a GPU
would refuse, before it runs, naming the kernel, the dimension, the value
and the limit. Each limit has a launch over it and its twin just inside it:
through the shared check (what the GPU backends call), on the simulator in
both dialects, through MLXKernel with a fake MLX kernel, and end to end
through the evaluation; and no task's seed crosses a limit at any size."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import pytest

from mlxsci.backends.mlx_gpu import CudaBackend, MetalBackend, MLXKernel
from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.candidate import parse
from mlxsci.kernel.launch_limits import check_launch, check_shared_memory
from mlxsci.kernel.spec import KernelFault, KernelSpec
from mlxsci.task import load_task, task_names
from mlxsci.worker.launch import launch_shapes

needs_sim = pytest.mark.skipif(not SimBackend.available(), reason="zig/mlx not available")

# (dialect, name, grid, threadgroup over the limit, the same inside it, message)
# The messages name the kernel, the dimension, the value and the limit.
OVER_AND_UNDER = [
    (
        "cuda",
        "grid_y",
        ((1, 65536, 1), (1, 1, 1)),
        ((1, 65535, 1), (1, 1, 1)),
        "kernel k: gridDim.y = 65536 blocks (grid (1, 65536, 1) / threadgroup (1, 1, 1), "
        "rounded up) exceeds CUDA's limit of 65535",
    ),
    (
        "cuda",
        "grid_z",
        ((1, 1, 131071), (1, 1, 2)),
        ((1, 1, 131070), (1, 1, 2)),
        "kernel k: gridDim.z = 65536 blocks (grid (1, 1, 131071) / threadgroup (1, 1, 2), "
        "rounded up) exceeds CUDA's limit of 65535",
    ),
    (
        "cuda",
        "block_x",
        ((2048, 1, 1), (2048, 1, 1)),
        ((2048, 1, 1), (1024, 1, 1)),
        "kernel k: blockDim.x = 2048 threads (min(threadgroup (2048, 1, 1), grid (2048, 1, 1))) "
        "exceeds CUDA's limit of 1024",
    ),
    (
        "cuda",
        "block_y",
        ((1, 2048, 1), (1, 2048, 1)),
        ((1, 2048, 1), (1, 1024, 1)),
        "kernel k: blockDim.y = 2048 threads (min(threadgroup (1, 2048, 1), grid (1, 2048, 1))) "
        "exceeds CUDA's limit of 1024",
    ),
    (
        "cuda",
        "block_z",
        ((1, 1, 128), (1, 1, 128)),
        ((1, 1, 128), (1, 1, 64)),
        "kernel k: blockDim.z = 128 threads (min(threadgroup (1, 1, 128), grid (1, 1, 128))) "
        "exceeds CUDA's limit of 64",
    ),
    (
        "cuda",
        "threads",
        ((64, 32, 1), (64, 32, 1)),
        ((64, 32, 1), (32, 32, 1)),
        "kernel k: threads per block = 2048 (block (64, 32, 1) = min(threadgroup (64, 32, 1), "
        "grid (64, 32, 1))) exceeds CUDA's limit of 1024",
    ),
    (
        "metal",
        "threads",
        ((64, 32, 1), (64, 32, 1)),
        ((64, 32, 1), (32, 32, 1)),
        "kernel k: threads per threadgroup = 2048 (threadgroup (64, 32, 1)) exceeds Metal's "
        "limit of 1024",
    ),
]
IDS = [f"{d}-{n}" for d, n, *_ in OVER_AND_UNDER]


# ------------------------------------------------------------ the shared check
@pytest.mark.parametrize("dialect, _name, over, under, message", OVER_AND_UNDER, ids=IDS)
def test_check_launch(dialect, _name, over, under, message):
    with pytest.raises(KernelFault) as e:
        check_launch(dialect, "k", *over)
    assert e.value.kind == "launch" and e.value.message == message
    check_launch(dialect, "k", *under)


def test_cuda_grid_x():
    # Only reachable past MLX's int grid, but a GPU backend could be handed one.
    with pytest.raises(KernelFault) as e:
        check_launch("cuda", "k", (2**31, 1, 1), (1, 1, 1))
    assert e.value.message == (
        "kernel k: gridDim.x = 2147483648 blocks (grid (2147483648, 1, 1) "
        "/ threadgroup (1, 1, 1), rounded up) exceeds CUDA's limit of "
        "2147483647"
    )
    check_launch("cuda", "k", (2**31 - 1, 1, 1), (1, 1, 1))
    check_launch("cuda", "k", (2**31, 1, 1), (2, 1, 1))


def test_cuda_limits_apply_to_mlx_block_and_blocks():
    # MLX launches block = min(threadgroup, grid): a wide threadgroup on a
    # narrow grid is fine on CUDA, while Metal checks the threadgroup as given.
    check_launch("cuda", "k", (3, 1, 1), (2048, 1, 1))
    with pytest.raises(KernelFault, match="threads per threadgroup = 2048"):
        check_launch("metal", "k", (3, 1, 1), (2048, 1, 1))
    # blocks = ceil(grid / threadgroup): 65535 whole blocks and a partial one.
    with pytest.raises(KernelFault, match=r"gridDim\.y = 65536 blocks"):
        check_launch("cuda", "k", (1, 65535 * 4 + 1, 1), (1, 4, 1))
    check_launch("cuda", "k", (1, 65535 * 4, 1), (1, 4, 1))
    # Metal has no 65535 cap on the grid.
    check_launch("metal", "k", (1, 65536, 65536), (1, 1, 1))


@pytest.mark.parametrize("dialect", ["metal", "cuda"])
def test_check_launch_rejects_bad_shapes(dialect):
    with pytest.raises(KernelFault, match=r"kernel k: threadgroup\.y = 0 is not positive"):
        check_launch(dialect, "k", (4, 4, 1), (1, 0, 1))
    with pytest.raises(KernelFault, match="must have three dimensions"):
        check_launch(dialect, "k", (4, 4), (1, 1))
    with pytest.raises(ValueError, match="unknown dialect"):
        check_launch("opencl", "k", (1, 1, 1), (1, 1, 1))


def test_check_shared_memory():
    with pytest.raises(KernelFault) as e:
        check_shared_memory("metal", "k", 32769)
    assert e.value.kind == "launch"
    assert e.value.message == (
        "kernel k: threadgroup memory = 32769 bytes exceeds Metal's limit of 32768 bytes"
    )
    check_shared_memory("metal", "k", 32768)
    with pytest.raises(KernelFault) as e:
        check_shared_memory("cuda", "k", 49153)
    assert e.value.message == (
        "kernel k: shared memory per block = 49153 bytes (static and "
        "dynamic, without opt-in) exceeds CUDA's limit of 49152 bytes"
    )
    check_shared_memory("cuda", "k", 49152)
    # More than 48000 dynamic bytes: MLX opts in, up to the H100's 227 KiB.
    check_shared_memory("cuda", "k", 64000, dynamic=64000)
    with pytest.raises(KernelFault) as e:
        check_shared_memory("cuda", "k", 240000, dynamic=240000)
    assert e.value.message == (
        "kernel k: shared memory per block = 240000 bytes (static and "
        "dynamic, with 240000 dynamic bytes opted in) exceeds CUDA's "
        "limit of 232448 bytes"
    )


# ------------------------------------------------------------ the GPU backends
class FakeMLXKernel:
    """Stands in for an mx.fast kernel object: records whether MLX was reached."""

    def __init__(self):
        self.calls = []

    def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return ["out"]


@pytest.mark.parametrize("dialect, _name, over, under, message", OVER_AND_UNDER, ids=IDS)
def test_mlx_kernel_checks_before_mlx(dialect, _name, over, under, message):
    backend = CudaBackend() if dialect == "cuda" else MetalBackend()
    fake = FakeMLXKernel()
    kernel = MLXKernel(backend, KernelSpec("k", (), ("o",), "o[0] = 1;", dialect=dialect), fake)
    kw = dict(inputs=[], output_shapes=[(1,)], output_dtypes=[mx.float32])
    with pytest.raises(KernelFault) as e:
        kernel(grid=over[0], threadgroup=over[1], **kw)
    assert e.value.message == message
    assert fake.calls == []  # a launch over a limit never reaches MLX
    assert kernel(grid=under[0], threadgroup=under[1], **kw) == ["out"]
    assert len(fake.calls) == 1 and fake.calls[0]["grid"] == under[0]


# ------------------------------------------------------------ the simulator
@pytest.fixture(scope="module")
def sims():
    return {d: SimBackend(dialect=d, launch_timeout_s=60.0) for d in ("metal", "cuda")}


def sim_run(backend, spec, grid, threadgroup):
    (o,) = backend.kernel(spec)(
        inputs=[],
        output_shapes=[(1,)],
        output_dtypes=[mx.int32],
        grid=grid,
        threadgroup=threadgroup,
        init_value=0,
    )
    return int(np.asarray(o)[0])


@needs_sim
@pytest.mark.parametrize("dialect, _name, over, under, message", OVER_AND_UNDER, ids=IDS)
def test_sim_launch_limits(sims, dialect, _name, over, under, message):
    body = (
        "if (threadIdx.x + threadIdx.y + threadIdx.z + blockIdx.x + blockIdx.y + blockIdx.z "
        "== 0) o[0] = 1;"
        if dialect == "cuda"
        else "if (thread_position_in_grid.x + thread_position_in_grid.y + "
        "thread_position_in_grid.z == 0) o[0] = 1;"
    )
    spec = KernelSpec("k", (), ("o",), body, dialect=dialect)
    with pytest.raises(KernelFault) as e:
        sim_run(sims[dialect], spec, *over)
    assert e.value.kind == "launch" and e.value.message == message
    assert sim_run(sims[dialect], spec, *under) == 1


@needs_sim
def test_sim_cuda_grid_x(sims):
    # gridDim.x = ceil(grid.x / threadgroup.x) <= grid.x, and MLX's grid is a
    # C++ int: only a grid past 2^31 - 1 crosses it, refused as a launch error.
    spec = KernelSpec("k", (), ("o",), "o[0] = 1;", dialect="cuda")
    with pytest.raises(KernelFault) as e:
        sim_run(sims["cuda"], spec, (2**31, 1, 1), (1, 1, 1))
    assert e.value.kind == "launch"


def tgmem_spec(dialect, nbytes, name="k", spec_class=KernelSpec, **kw):
    n = nbytes // 4
    if dialect == "metal":
        body = (
            f"threadgroup float buf[{n}];\nuint t = thread_position_in_grid.x;\n"
            f"buf[t] = 1.0f; buf[{n - 1}] = 2.0f;\n"
            "threadgroup_barrier(mem_flags::mem_threadgroup);\no[0] = int(buf[0]);"
        )
    else:
        body = (
            f"__shared__ float buf[{n}];\nint t = threadIdx.x;\n"
            f"buf[t] = 1.0f; buf[{n - 1}] = 2.0f;\n__syncthreads();\no[0] = int(buf[0]);"
        )
    return spec_class(name, (), ("o",), body, dialect=dialect, **kw)


@needs_sim
@pytest.mark.parametrize(
    "dialect, limit, message",
    [
        (
            "metal",
            32768,
            "kernel big: threadgroup memory = 32784 bytes exceeds Metal's limit of 32768 bytes",
        ),
        (
            "cuda",
            49152,
            "kernel big: shared memory per block = 49168 bytes (static and dynamic, "
            "without opt-in) exceeds CUDA's limit of 49152 bytes",
        ),
    ],
)
@pytest.mark.slow
def test_sim_threadgroup_memory(sims, dialect, limit, message):
    with pytest.raises(KernelFault) as e:
        sim_run(sims[dialect], tgmem_spec(dialect, limit + 16, "big"), (1, 1, 1), (1, 1, 1))
    assert e.value.kind == "launch" and e.value.message == message
    assert sim_run(sims[dialect], tgmem_spec(dialect, limit), (1, 1, 1), (1, 1, 1)) == 1


@needs_sim
@pytest.mark.slow
def test_sim_cuda_dynamic_shared_memory_opt_in(sims):
    @dataclass(frozen=True)
    class Spec(KernelSpec):
        shared_memory: int = 0

    body = (
        "extern __shared__ float smem[];\nsmem[threadIdx.x] = 1.0f;\n__syncthreads();\n"
        "o[0] = int(smem[0]);"
    )
    ok = Spec("dyn", (), ("o",), body, dialect="cuda", shared_memory=64000)
    assert sim_run(sims["cuda"], ok, (1, 1, 1), (1, 1, 1)) == 1
    big = Spec("dyn_big", (), ("o",), body, dialect="cuda", shared_memory=240000)
    with pytest.raises(KernelFault) as e:
        sim_run(sims["cuda"], big, (1, 1, 1), (1, 1, 1))
    assert e.value.kind == "launch"
    assert e.value.message == (
        "kernel dyn_big: shared memory per block = 240000 bytes (static "
        "and dynamic, with 240000 dynamic bytes opted in) exceeds CUDA's "
        "limit of 232448 bytes"
    )


# ------------------------------------------------------------ end to end
FFT3D = load_task("fft3d")


@needs_sim
@pytest.mark.parametrize(
    "dialect, grid, threadgroup, reason",
    [
        # Metal-Sci's fft3d grid (N, N*N, 1) failed at N = 256 on an H100; at the
        # smoke size N = 16 the same gridDim.y overflow needs N^4 lines.
        (
            "cuda",
            "(N, N * N * N * N, 1)",
            "(N, 1, 1)",
            "runtime error at size 16: launch: kernel fft3d_x: gridDim.y = 65536 blocks "
            "(grid (16, 65536, 1) / threadgroup (16, 1, 1), rounded up) exceeds CUDA's limit of 65535",
        ),
        (
            "metal",
            "(N, N, N)",
            "(N, 128, 1)",
            "runtime error at size 16: launch: kernel fft3d_x: threads per threadgroup = 2048 "
            "(threadgroup (16, 128, 1)) exceeds Metal's limit of 1024",
        ),
    ],
)
def test_launch_over_a_limit_is_a_runtime_error_verdict(dialect, grid, threadgroup, reason):
    seed = FFT3D.seed(dialect)
    bad = seed.replace(
        "//! grid = (N, N, N)\n//! threadgroup = (N, 1, 1)\n",
        f"//! grid = {grid}\n//! threadgroup = {threadgroup}\n",
    )
    assert bad.count(f"//! grid = {grid}\n") == 3
    ev = evaluate(
        "fft3d", bad, backend="sim", dialect=dialect, size_set="smoke", n_warmup=1, n_measure=1
    )
    assert ev.compile_ok and not ev.correct
    assert ev.fail_reason == reason


# ------------------------------------------------------------ every seed, every size
def seed_launches():
    for name in task_names():
        task = load_task(name)
        for dialect in ("metal", "cuda"):
            candidate = parse(task.seed(dialect), dialect=dialect)
            for size in task.size_set("all"):
                shapes = launch_shapes(task, candidate, size.params)
                for kernel, (grid, threadgroup) in shapes.items():
                    yield name, dialect, size.label, kernel, grid, threadgroup


def test_no_seed_launch_crosses_a_limit():
    # No kernel runs: the launch expressions of every seed at every size
    # (smoke, in-dist, held-out), through the check every backend makes.
    failures, checked = [], 0
    for name, dialect, label, kernel, grid, threadgroup in seed_launches():
        checked += 1
        try:
            check_launch(dialect, kernel, grid, threadgroup)
        except KernelFault as exc:
            failures.append(f"{name} {dialect} {label}: {exc.message}")
    assert not failures, "\n".join(failures)
    assert checked >= 12 * 2 * 3
