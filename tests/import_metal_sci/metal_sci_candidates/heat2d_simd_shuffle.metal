#include <metal_stdlib>
using namespace metal;

// heat2d with simd shuffles: the host's threadgroups are 16 wide, so a
// 32-lane simdgroup holds two complete 16-cell rows of the block. The left
// and right neighbours come from the adjacent lanes (simd_shuffle_up/down);
// only the block's edge lanes load them from memory. Every lane takes part in
// the shuffles (coordinates clamped) before any thread exits.
#define TG_W 16

kernel void heat_step(device const float* u_in  [[buffer(0)]],
                      device float*       u_out [[buffer(1)]],
                      constant uint&      NX    [[buffer(2)]],
                      constant uint&      NY    [[buffer(3)]],
                      constant float&     alpha [[buffer(4)]],
                      uint2   gid  [[thread_position_in_grid]],
                      ushort  lane [[thread_index_in_simdgroup]])
{
    const uint i = min(gid.x, NX - 1);
    const uint j = min(gid.y, NY - 1);
    const uint idx = j * NX + i;
    const float c = u_in[idx];
    float l = simd_shuffle_up(c, ushort(1));
    float r = simd_shuffle_down(c, ushort(1));
    if (gid.x >= NX || gid.y >= NY) return;
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        u_out[idx] = c;
        return;
    }
    const ushort col = lane % TG_W;  // the lane's column in the block
    if (col == 0) l = u_in[idx - 1];
    if (col == TG_W - 1) r = u_in[idx + 1];
    const float d = u_in[idx - NX];
    const float u = u_in[idx + NX];
    u_out[idx] = c + alpha * (l + r + d + u - 4.0f * c);
}
