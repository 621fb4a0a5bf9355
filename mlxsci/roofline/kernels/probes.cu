//! kernel stream_copy
// Streaming bandwidth probe: each pass reads one float4 per thread and writes
// it once. A launch sweeps the working set `passes` times, so that even a
// cache-sized working set moves enough bytes for the kernel's own time to
// dominate its launch ramp. Each pass shifts the element a thread touches by
// one block, so the data a thread touches was last touched by another block,
// likely on another SM. Loads use __ldcg (cache in L2 only): a task kernel
// makes one pass per launch and cannot reuse an SM's L1 across launches, but
// does hit L2, so a working set that fits in L1 must show L2 bandwidth here.
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
const uint32_t n = n4[0];
const uint32_t np = passes[0];
if (i < n) {
    const float4* s = reinterpret_cast<const float4*>(src);
    float4* d = reinterpret_cast<float4*>(dst);
    const uint32_t shift = blockDim.x % n;
    uint32_t j = i;
    for (uint32_t p = 0; p < np; ++p) {
        d[j] = __ldcg(s + j);
        j += shift;
        j = j >= n ? j - n : j;
    }
}
//! kernel stream_triad
// STREAM triad: two float4 reads and one float4 write per thread and pass,
// rotated and read through L2 like stream_copy (the roofline takes the better
// of this and the copy at each working set).
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
const uint32_t n = n4[0];
const uint32_t np = passes[0];
if (i < n) {
    const float4* a = reinterpret_cast<const float4*>(src);
    const float4* b = reinterpret_cast<const float4*>(src2);
    float4* d = reinterpret_cast<float4*>(dst);
    const uint32_t shift = blockDim.x % n;
    uint32_t j = i;
    for (uint32_t p = 0; p < np; ++p) {
        float4 x = __ldcg(a + j);
        float4 y = __ldcg(b + j);
        d[j] = make_float4(x.x * 0.5f + y.x, x.y * 0.5f + y.y, x.z * 0.5f + y.z, x.w * 0.5f + y.w);
        j += shift;
        j = j >= n ? j - n : j;
    }
}
//! kernel stream_read
// Read-only bandwidth for working sets too small to give every GPU thread
// slot a float4 of its own: more threads than elements, each reading `passes`
// float4 through L2 (__ldcg, as in stream_copy) at indices rotated by one
// block per pass, summed. The sum is written only if it falls below `bound`
// (never for positive data), so the loads cannot be optimized away and almost
// nothing is written. Thread 0 passes `bound` through to `out` so that chained
// runs (the wall timer) each depend on the last one.
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
const uint32_t n = n4[0];
const uint32_t np = passes[0];
const float4* s = reinterpret_cast<const float4*>(src);
const uint32_t shift = blockDim.x % n;
uint32_t j = i % n;
float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
for (uint32_t p = 0; p < np; ++p) {
    float4 x = __ldcg(s + j);
    acc.x += x.x;
    acc.y += x.y;
    acc.z += x.z;
    acc.w += x.w;
    j += shift;
    j = j >= n ? j - n : j;
}
const float total = (acc.x + acc.y) + (acc.z + acc.w);
const float limit = bound[0];
if (i == 0) {
    out[0] = limit;
}
if (total < limit) {
    out[0] = total;
}
//! kernel fma_peak
// FP32 throughput probe: 32 independent multiply-add chains per thread
// (the same 64 FLOPs per iteration as the Metal probe's 8 float4 chains).
// The outer loop is unrolled so its counter and branch take a small share of
// the issue slots. `seed` has one value per thread so that chained runs (the
// wall timer) feed one run's output to the next; values may overflow there,
// which costs a GPU nothing.
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
const uint32_t threads = n[0];
const float m[4] = {i < threads ? seed[i] : 0.9999f, 0.999f, 1.0001f, 0.5f};
const float c[4] = {0.001f, -0.002f, 0.003f, 0.25f};
float v[32];
#pragma unroll
for (int k = 0; k < 32; ++k) {
    v[k] = float(i) + float(k / 4);
}
const uint32_t count = iters[0];
#pragma unroll 4
for (uint32_t k = 0; k < count; ++k) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        v[j] = v[j] * m[j % 4] + c[j % 4];
    }
}
float s = 0.0f;
#pragma unroll
for (int k = 0; k < 32; ++k) {
    s += v[k];
}
if (i < threads) {
    out[i] = s;
}
