#include <metal_stdlib>
using namespace metal;

// saxpy seed: y <- a*x + y in place, one thread per element. The host rounds
// the grid up to a multiple of the threadgroup width, so guard i < N.
kernel void saxpy(device const float* x [[buffer(0)]],
                  device float*       y [[buffer(1)]],
                  constant float&     a [[buffer(2)]],
                  constant uint&      N [[buffer(3)]],
                  uint i [[thread_position_in_grid]])
{
    if (i >= N) return;
    y[i] = a * x[i] + y[i];
}
