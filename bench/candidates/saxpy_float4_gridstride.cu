//! param BLOCKS_PER_SM = 8 {4, 8, 16}
//! kernel saxpy
//! grid = (min(ceil_div(N, 4 * 256), 132 * BLOCKS_PER_SM) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// A tuned saxpy for the GPU bench (bench/bench_gpu.py's companion check that
// the score can reach the roofline): float4 loads and stores, a grid-stride
// loop over a grid sized to the GPU (132 SMs on an H100), the last N % 4
// elements by the first threads. MLX allocates arrays 16-byte aligned.
const uint32_t n = N[0];
const uint32_t n4 = n / 4;
const float s = a[0];
const float4* x4 = reinterpret_cast<const float4*>(x);
const float4* y4 = reinterpret_cast<const float4*>(y);
float4* o4 = reinterpret_cast<float4*>(y_out);
const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x;
const uint32_t stride = gridDim.x * blockDim.x;
for (uint32_t i = first; i < n4; i += stride) {
    const float4 xv = x4[i];
    const float4 yv = y4[i];
    o4[i] = make_float4(s * xv.x + yv.x, s * xv.y + yv.y, s * xv.z + yv.z, s * xv.w + yv.w);
}
const uint32_t tail = 4 * n4 + first;
if (tail < n) {
    y_out[tail] = s * x[tail] + y[tail];
}
