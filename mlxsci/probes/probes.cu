//! kernel stream_copy
// Streaming bandwidth probe: one float4 per thread, read once, written once.
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < n4[0]) {
    reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
}
//! kernel stream_triad
// STREAM triad: two float4 reads and one float4 write per thread (the
// roofline takes the better of this and the copy at each working set).
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
if (i < n4[0]) {
    float4 p = reinterpret_cast<const float4*>(src)[i];
    float4 q = reinterpret_cast<const float4*>(src2)[i];
    reinterpret_cast<float4*>(dst)[i] =
        make_float4(p.x * 0.5f + q.x, p.y * 0.5f + q.y, p.z * 0.5f + q.z, p.w * 0.5f + q.w);
}
//! kernel fma_peak
// FP32 throughput probe: 32 independent multiply-add chains per thread
// (the same 64 FLOPs per iteration as the Metal probe's 8 float4 chains).
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
const float m[4] = {seed[0], 0.999f, 1.0001f, 0.5f};
const float c[4] = {0.001f, -0.002f, 0.003f, 0.25f};
float v[32];
#pragma unroll
for (int k = 0; k < 32; ++k) {
    v[k] = float(i) + float(k / 4);
}
for (uint32_t k = 0; k < iters[0]; ++k) {
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
if (i < n[0]) {
    out[i] = s;
}
