#include <metal_stdlib>
using namespace metal;

// morton seed: 7-point heat step on a Z-order (Morton) grid; thread tid owns
// element tid. Bit-loop decode of tid, boundary copy, six bit-loop
// re-encodes for the neighbours, seven loads.

static inline uint encode3(uint x, uint y, uint z, uint logN) {
    uint m = 0;
    for (uint b = 0; b < logN; ++b) {
        m |= ((x >> b) & 1u) << (3 * b);
        m |= ((y >> b) & 1u) << (3 * b + 1);
        m |= ((z >> b) & 1u) << (3 * b + 2);
    }
    return m;
}

kernel void morton_stencil(device const float* u_in  [[buffer(0)]],
                           device float*       u_out [[buffer(1)]],
                           constant uint&      N     [[buffer(2)]],
                           constant uint&      logN  [[buffer(3)]],
                           constant float&     alpha [[buffer(4)]],
                           uint tid [[thread_position_in_grid]])
{
    if (tid >= N * N * N) return;
    uint x = 0, y = 0, z = 0;
    for (uint b = 0; b < logN; ++b) {
        x |= ((tid >> (3 * b)) & 1u) << b;
        y |= ((tid >> (3 * b + 1)) & 1u) << b;
        z |= ((tid >> (3 * b + 2)) & 1u) << b;
    }
    float c = u_in[tid];
    if (x == 0 || y == 0 || z == 0 || x == N - 1 || y == N - 1 || z == N - 1) {
        u_out[tid] = c;
        return;
    }
    float s = u_in[encode3(x - 1, y, z, logN)] + u_in[encode3(x + 1, y, z, logN)]
            + u_in[encode3(x, y - 1, z, logN)] + u_in[encode3(x, y + 1, z, logN)]
            + u_in[encode3(x, y, z - 1, logN)] + u_in[encode3(x, y, z + 1, logN)];
    u_out[tid] = c + alpha * (s - 6.0f * c);
}
