#include <metal_stdlib>
using namespace metal;

// heat2d seed: one explicit step of the 2-D heat equation, one thread per
// cell, Dirichlet edges copied through, five direct global loads.
kernel void heat_step(device const float* u_in  [[buffer(0)]],
                      device float*       u_out [[buffer(1)]],
                      constant uint&      NX    [[buffer(2)]],
                      constant uint&      NY    [[buffer(3)]],
                      constant float&     alpha [[buffer(4)]],
                      uint2 gid [[thread_position_in_grid]])
{
    uint i = gid.x;
    uint j = gid.y;
    if (i >= NX || j >= NY) return;
    uint idx = j * NX + i;
    float c = u_in[idx];
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        u_out[idx] = c;
        return;
    }
    float l = u_in[idx - 1];
    float r = u_in[idx + 1];
    float d = u_in[idx - NX];
    float u = u_in[idx + NX];
    u_out[idx] = c + alpha * (l + r + d + u - 4.0f * c);
}
