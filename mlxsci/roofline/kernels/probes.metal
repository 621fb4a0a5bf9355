//! kernel stream_copy
// Streaming bandwidth probe: each pass reads one float4 per thread and writes
// it once. A launch sweeps the working set `passes` times, so that even a
// cache-sized working set moves enough bytes for the kernel's own time to
// dominate its launch ramp. Each pass shifts the element a thread touches by
// one threadgroup (dispatch_threads_per_threadgroup: the same in every group,
// edge groups included, so the shift is a permutation of the elements): the
// data a thread touches was last touched by another threadgroup, likely on
// another core. Metal has no load that skips the core's L1 (CUDA's probe
// uses __ldcg), so a working set that fits in L1 may show some L1 reuse.
uint i = thread_position_in_grid.x;
if (i < n4) {
    const device float4* s = (const device float4*)src;
    device float4* d = (device float4*)dst;
    uint shift = dispatch_threads_per_threadgroup.x % n4;
    uint j = i;
    for (uint p = 0; p < passes; ++p) {
        d[j] = s[j];
        j += shift;
        j = j >= n4 ? j - n4 : j;
    }
}
//! kernel stream_triad
// STREAM triad: two float4 reads and one float4 write per thread and pass,
// rotated like stream_copy. Some machines stream a 2:1 read/write mix faster
// than a copy; the roofline takes the better of the two at each working set.
uint i = thread_position_in_grid.x;
if (i < n4) {
    const device float4* a = (const device float4*)src;
    const device float4* b = (const device float4*)src2;
    device float4* d = (device float4*)dst;
    uint shift = dispatch_threads_per_threadgroup.x % n4;
    uint j = i;
    for (uint p = 0; p < passes; ++p) {
        d[j] = a[j] * 0.5f + b[j];
        j += shift;
        j = j >= n4 ? j - n4 : j;
    }
}
//! kernel stream_read
// Read-only bandwidth for working sets too small to give every GPU thread
// slot a float4 of its own: more threads than elements, each reading `passes`
// float4 at indices rotated by one threadgroup per pass, summed. The sum is
// written only if it falls below `bound` (never for positive data), so the
// loads cannot be optimized away and almost nothing is written. Thread 0
// passes `bound` through to `out` so that chained runs (the wall timer) each
// depend on the last one. As in stream_copy, L1 may serve some reuse.
uint i = thread_position_in_grid.x;
const device float4* s = (const device float4*)src;
uint shift = dispatch_threads_per_threadgroup.x % n4;
uint j = i % n4;
float4 acc = float4(0.0f);
for (uint p = 0; p < passes; ++p) {
    acc += s[j];
    j += shift;
    j = j >= n4 ? j - n4 : j;
}
float total = (acc.x + acc.y) + (acc.z + acc.w);
if (i == 0) {
    out[0] = bound[0];
}
if (total < bound[0]) {
    out[0] = total;
}
//! kernel fma_peak
// FP32 throughput probe: 8 independent float4 multiply-add chains per thread,
// so the FLOPs are 64 per iteration and latency is hidden. The loop is
// unrolled so its counter and branch take a small share of the issue slots.
// `seed` has one value per thread so that chained runs (the wall timer) feed
// one run's output to the next; values may overflow there, which costs a GPU
// nothing.
uint i = thread_position_in_grid.x;
float4 m = float4(i < n ? seed[i] : 0.9999f, 0.999f, 1.0001f, 0.5f);
float4 c = float4(0.001f, -0.002f, 0.003f, 0.25f);
float4 v0 = float4(float(i));
float4 v1 = v0 + 1.0f;
float4 v2 = v0 + 2.0f;
float4 v3 = v0 + 3.0f;
float4 v4 = v0 + 4.0f;
float4 v5 = v0 + 5.0f;
float4 v6 = v0 + 6.0f;
float4 v7 = v0 + 7.0f;
#pragma unroll 4
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
