#include <metal_stdlib>
using namespace metal;

// saxpy with float4 views made by reinterpret_cast and a compound update:
// thread i < N/4 does y4[i] += a * x4[i] (16-byte accesses), the last N % 4
// elements are handled one per thread by the threads right after.
[[kernel]] void saxpy(device const float* x [[buffer(0)]],
                      device float*       y [[buffer(1)]],
                      constant float&     a [[buffer(2)]],
                      constant uint&      N [[buffer(3)]],
                      uint gid [[thread_position_in_grid]])
{
    const uint vec = N / 4;
    if (gid < vec) {
        device const float4* x4 = reinterpret_cast<device const float4*>(x);
        device float4* y4 = reinterpret_cast<device float4*>(y);
        y4[gid] += a * x4[gid];
    } else if (gid < vec + (N & 3u)) {
        device float* tail = &y[4 * vec];
        const uint k = gid - vec;
        tail[k] = fma(a, x[4 * vec + k], tail[k]);
    }
}
