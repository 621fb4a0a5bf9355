"""What the system prompt says differently per dialect: the role, the edge and
memory hard rules, and the long pitfalls and optimisation hints (`WORDS`, one
`DialectWords` entry per dialect name).

It is separate from search/prompts/compose.py because it is pure wording, most of it
long fixed text; search/prompts/compose.py assembles the prompts around it. The
contract section's per-dialect words are in search/prompts/contract.py.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from mlxsci.kernel.signature import METAL_ATTRIBUTES

_METAL_PITFALLS = """## Metal pitfalls in MLX kernel bodies
- MLX compiles: its own preamble (which includes <metal_stdlib> and `using namespace metal;`),
  your header, then `[[kernel]] void custom_kernel_...(<generated parameters>) {` + your body
  + `}`. `#include <metal_stdlib>` is not needed. Do not write `kernel void`, `[[kernel]]`,
  buffer indices, or function attributes such as `[[max_total_threads_per_threadgroup(N)]]`:
  there is no place for them.
- Thread attributes are used by name and declared by MLX. If the body's text contains one
  of these names, MLX appends it as a parameter with a fixed type (uint3 for positions and
  counts, uint for indices; you cannot pick ushort):
  @ATTRS@.
  The search is plain text, so a mention in a comment declares it too. Never declare a
  variable with one of these names. The header is not searched: a header helper that
  needs a thread index must receive it as an argument.
- Writing `<input>_shape`, `<input>_strides` or `<input>_ndim` in a body adds those
  parameters; avoid such identifiers unless you mean them.
- Scalars arrive as `const constant T&` references: use them directly (`NX`, not `NX[0]`).
  Arrays with fewer than 8 elements arrive as `const constant T*`, larger ones as
  `const device T*`. Reinterpret float data as vectors with casts such as
  `((const device float4*)pos_in)[i]`.
- Template params from `//! param` are visible in bodies but not in the header, so a
  header helper that needs one must itself be a template (`template <int T> ...`).
- Program-scope constants (tables, coefficients) go in the header with the `constant`
  address space: `constant float W[9] = {...};`.
- `threadgroup` arrays are declared in the body with compile-time sizes (literals, header
  constants or params); there is no dynamic threadgroup memory.
- Every thread of a threadgroup must reach each `threadgroup_barrier`: do not `return`
  early before a barrier, guard the work instead. Partial edge threadgroups are smaller
  than requested: `threads_per_threadgroup` holds the actual size.
- `half` is a type (`float16_t` is the same); `bfloat16_t` exists. No lambdas, recursion,
  exceptions, virtual functions or dynamic allocation. Do not redefine names from MLX's
  preamble (`ceildiv`, `elem_to_loc`, `Limits`, `complex64_t`, ...).
- Atomic outputs are `device atomic<T>*`: use `atomic_fetch_add_explicit(&out[i], v,
  memory_order_relaxed)` and friends.
- Keep the file ASCII only.

## Optimisations that often pay off
- Threadgroup tiling: load a tile (plus halo) cooperatively into threadgroup memory, one
  `threadgroup_barrier(mem_flags::mem_threadgroup)`, then compute from it.
- SIMD-group functions instead of threadgroup memory and barriers: `simd_sum`, `simd_max`,
  `simd_shuffle`, `simd_shuffle_down` / `_up` / `_xor`, `simd_broadcast`,
  `simd_prefix_exclusive_sum`.
- Vectorised, coalesced memory access (`float4` loads and stores), fewer redundant loads,
  values kept in registers.
- More work per thread (several outputs, register blocking, loop unrolling with a
  compile-time trip count) when it cuts loads or overhead; the launch shape and params
  let you size this. Launch shapes matter: try threadgroup sizes that are multiples of 32.
- Cheaper arithmetic: precomputed constants, `fma`, `rsqrt`, `fast::` math where the
  tolerance allows. The number of launches is fixed by the host; the gain is inside each
  launch.
"""

_CUDA_PITFALLS = """## CUDA pitfalls in MLX kernel bodies
- MLX compiles (NVRTC): its device utilities, your header at global scope, then
  `namespace mlx::core::cu { __global__ void custom_kernel_...(<generated parameters>) {`
  + your body + `} }`. Do not write `__global__`, a kernel signature or launch bounds.
- Every input, scalars included, arrives as `const T*`: read a scalar as `NX[0]`. Outputs
  are `T*`; outputs that start from an init value are updated with `atomicAdd` and
  friends.
- Use `threadIdx`, `blockIdx`, `blockDim`, `gridDim`. Whole blocks are launched: guard
  every index.
- `//! param` values become `constexpr int` inside the body: visible in bodies, not in the
  header, so header helpers that need one must be templates. Header functions need no
  `__device__`.
- Shared memory: static `__shared__` arrays with compile-time sizes; `__syncthreads()` must
  be reached by every thread of the block (no early return before it).
- Warp width 32: `__shfl_xor_sync(0xffffffff, v, m)`, `__shfl_down_sync`, `__shfl_sync`.
- No `--use_fast_math`: use intrinsics such as `__expf`, `rsqrtf`, `__fdividef` where the
  tolerance allows. Keep the file ASCII only.

## Optimisations that often pay off
Shared-memory tiling with halos, warp-shuffle reductions, vectorised `float4` loads via
`reinterpret_cast`, coalesced access, more work per thread when it saves loads, block
sizes that are multiples of 32. The number of launches is fixed by the host.
"""


@dataclass(frozen=True)
class DialectWords:
    """What the system prompt says differently in one dialect."""

    role: str  # who the model is asked to be
    edge_rule: str  # hard rule: which threads run at the data's edges
    memory_rule: str  # hard rule: on-chip (threadgroup / shared) memory
    pitfalls: str  # the dialect's pitfalls and optimisation hints


WORDS = {
    "metal": DialectWords(
        role="You are an expert Metal Shading Language (MSL) engineer who writes fast, "
        "correct GPU compute kernels for Apple GPUs. Your kernels are bodies for "
        "MLX's `mx.fast.metal_kernel`.",
        edge_rule=(
            "On Metal exactly grid.x * grid.y * grid.z threads run and the threadgroups on\n"
            "  the far edges may be partial, so guard every index against the data bounds."
        ),
        memory_rule=(
            "Threadgroup memory is at most 32 KB per threadgroup, declared statically in\n"
            "  the body."
        ),
        pitfalls=_METAL_PITFALLS.replace(
            "@ATTRS@",
            textwrap.fill(
                ", ".join(f"`{a}`" for a, _ in METAL_ATTRIBUTES), width=88, subsequent_indent="  "
            ),
        ),
    ),
    "cuda": DialectWords(
        role="You are an expert CUDA engineer who writes fast, correct GPU compute kernels "
        "for NVIDIA GPUs. Your kernels are bodies for MLX's `mx.fast.cuda_kernel`.",
        edge_rule=(
            "CUDA launches whole blocks (ceil(grid / threadgroup) per axis), so threads past\n"
            "  the end of the data run too: guard every index against the data bounds."
        ),
        memory_rule=(
            "Shared memory is static `__shared__` arrays in the body, at most 48 KB per\n"
            "  block (stay under 32 KB to keep occupancy)."
        ),
        pitfalls=_CUDA_PITFALLS,
    ),
}
