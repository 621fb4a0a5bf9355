"""Row softmax as a custom Metal kernel.

One threadgroup per row: each thread strides over the row, then the
threadgroup reduces the row's maximum and the sum of exponentials in two
steps (within each SIMD group with simd_max / simd_sum, then across the
SIMD groups through threadgroup memory), and every thread writes its
elements of the result. Plain MLX: `mx.fast.metal_kernel`, made once, the
first time `softmax` is called.
"""

from __future__ import annotations

import functools

import mlx.core as mx

THREADS = 256  # threads per row (a multiple of 32, at most 1024)

SOURCE = """
uint row = threadgroup_position_in_grid.x;
uint lane = thread_position_in_threadgroup.x;
uint simd_lane = thread_index_in_simdgroup;
uint simd_group = simdgroup_index_in_threadgroup;
uint cols = x_shape[1];
// Indexed from the row's start rather than through a `const device float*`:
// MLX binds an input of fewer than 8 elements in the constant address space.
size_t start = size_t(row) * cols;
threadgroup float partial[THREADS / 32];

// The row's maximum.
float m = -INFINITY;
for (uint j = lane; j < cols; j += THREADS) {
    m = max(m, x[start + j]);
}
m = simd_max(m);
if (simd_lane == 0) {
    partial[simd_group] = m;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
m = partial[0];
for (uint k = 1; k < THREADS / 32; ++k) {
    m = max(m, partial[k]);
}
threadgroup_barrier(mem_flags::mem_threadgroup);

// The sum of exp(x - max).
float s = 0.0f;
for (uint j = lane; j < cols; j += THREADS) {
    s += exp(x[start + j] - m);
}
s = simd_sum(s);
if (simd_lane == 0) {
    partial[simd_group] = s;
}
threadgroup_barrier(mem_flags::mem_threadgroup);
s = 0.0f;
for (uint k = 0; k < THREADS / 32; ++k) {
    s += partial[k];
}

float inv = 1.0f / s;
for (uint j = lane; j < cols; j += THREADS) {
    y[start + j] = exp(x[start + j] - m) * inv;
}
"""


@functools.cache
def softmax_kernel():
    """The kernel object, made on first use (mx.fast.metal_kernel as it is then)."""
    return mx.fast.metal_kernel(
        name="row_softmax",
        input_names=["x"],
        output_names=["y"],
        source=SOURCE,
    )


def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis of a 2-D float32 array."""
    if x.ndim != 2 or x.dtype != mx.float32:
        raise ValueError(f"softmax takes a 2-D float32 array, got {x.ndim}-D {x.dtype}")
    rows, _ = x.shape
    (y,) = softmax_kernel()(
        inputs=[x],
        template=[("THREADS", THREADS)],
        grid=(rows * THREADS, 1, 1),
        threadgroup=(THREADS, 1, 1),
        output_shapes=[x.shape],
        output_dtypes=[x.dtype],
    )
    return y
