#include <metal_stdlib>
using namespace metal;

// saxpy, vectorised. The first N/4 threads each update one float4 of y with
// 16-byte loads and stores (y viewed as float4 through a writable pointer);
// the next N % 4 threads finish the scalar tail. The host still launches N
// threads, so the rest exit at once.
kernel void saxpy(device const float* x [[buffer(0)]],
                  device float*       y [[buffer(1)]],
                  constant float&     a [[buffer(2)]],
                  constant uint&      N [[buffer(3)]],
                  uint i [[thread_position_in_grid]])
{
    const uint n4 = N >> 2;
    device const float4* x4 = (device const float4*)x;
    device float4* y4 = (device float4*)y;
    if (i < n4) {
        y4[i] = fma(float4(a), x4[i], y4[i]);
        return;
    }
    const uint t = (n4 << 2) + (i - n4);
    if (t < N) {
        y[t] = fma(a, x[t], y[t]);
    }
}
