//! kernel saxpy
//! grid = (ceil_div(N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// Naive seed: one thread per element, guarded because the grid is rounded up.
// Scalars arrive as pointers to 0-d arrays: read them as a[0], N[0].
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i >= N[0]) {
    return;
}
y_out[i] = a[0] * x[i] + y[i];
