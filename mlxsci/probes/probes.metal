//! kernel stream_copy
// Streaming bandwidth probe: one float4 per thread, read once, written once.
uint i = thread_position_in_grid.x;
if (i < n4) {
    ((device float4*)dst)[i] = ((const device float4*)src)[i];
}
//! kernel stream_triad
// STREAM triad: two float4 reads and one float4 write per thread. Some
// machines stream a 2:1 read/write mix faster than a copy; the roofline takes
// the better of the two at each working set.
uint i = thread_position_in_grid.x;
if (i < n4) {
    const device float4* p = (const device float4*)src;
    const device float4* q = (const device float4*)src2;
    ((device float4*)dst)[i] = p[i] * 0.5f + q[i];
}
//! kernel fma_peak
// FP32 throughput probe: 8 independent float4 multiply-add chains per thread,
// so the FLOPs are 64 per iteration and latency is hidden.
uint i = thread_position_in_grid.x;
float4 m = float4(seed, 0.999f, 1.0001f, 0.5f);
float4 c = float4(0.001f, -0.002f, 0.003f, 0.25f);
float4 v0 = float4(float(i));
float4 v1 = v0 + 1.0f;
float4 v2 = v0 + 2.0f;
float4 v3 = v0 + 3.0f;
float4 v4 = v0 + 4.0f;
float4 v5 = v0 + 5.0f;
float4 v6 = v0 + 6.0f;
float4 v7 = v0 + 7.0f;
for (uint k = 0; k < iters; ++k) {
    v0 = v0 * m + c;
    v1 = v1 * m + c;
    v2 = v2 * m + c;
    v3 = v3 * m + c;
    v4 = v4 * m + c;
    v5 = v5 * m + c;
    v6 = v6 * m + c;
    v7 = v7 * m + c;
}
float4 s = ((v0 + v1) + (v2 + v3)) + ((v4 + v5) + (v6 + v7));
if (i < n) {
    out[i] = s.x + s.y + s.z + s.w;
}
