#include <metal_stdlib>
using namespace metal;

// wave3d seed: leapfrog step of the 3-D wave equation, one thread per cell,
// faces copy u_curr, eight global loads, no threadgroup memory.
kernel void wave_step(device const float* u_prev [[buffer(0)]],
                      device const float* u_curr [[buffer(1)]],
                      device float*       u_next [[buffer(2)]],
                      constant uint&      NX     [[buffer(3)]],
                      constant uint&      NY     [[buffer(4)]],
                      constant uint&      NZ     [[buffer(5)]],
                      constant float&     alpha  [[buffer(6)]],
                      uint3 gid [[thread_position_in_grid]])
{
    uint i = gid.x, j = gid.y, k = gid.z;
    if (i >= NX || j >= NY || k >= NZ) return;
    uint sx = 1, sy = NX, sz = NX * NY;
    uint idx = k * sz + j * sy + i;
    float c = u_curr[idx];
    if (i == 0 || j == 0 || k == 0 || i == NX - 1 || j == NY - 1 || k == NZ - 1) {
        u_next[idx] = c;
        return;
    }
    float lap = u_curr[idx - sx] + u_curr[idx + sx]
              + u_curr[idx - sy] + u_curr[idx + sy]
              + u_curr[idx - sz] + u_curr[idx + sz]
              - 6.0f * c;
    u_next[idx] = 2.0f * c - u_prev[idx] + alpha * lap;
}
