#include <metal_stdlib>
using namespace metal;

// morton: magic-number bit spreading instead of bit loops. The cell's
// coordinates come from compacting every third bit of tid, and each
// neighbour's Morton index is formed directly in Morton space: to step one
// axis, fill the other axes' bits with ones (so a carry skips them), add or
// subtract one, and mask back (interior cells never carry out of the grid).
#define MASK_X 0x09249249u
#define MASK_Y 0x12492492u
#define MASK_Z 0x24924924u

static_assert((MASK_X | MASK_Y | MASK_Z) == 0x3FFFFFFFu, "the three masks tile 30 bits");

METAL_FUNC uint compact1by2(uint v) {
    v &= 0x09249249u;
    v = (v ^ (v >> 2)) & 0x030C30C3u;
    v = (v ^ (v >> 4)) & 0x0300F00Fu;
    v = (v ^ (v >> 8)) & 0xFF0000FFu;
    v = (v ^ (v >> 16)) & 0x000003FFu;
    return v;
}

METAL_FUNC uint inc_axis(uint m, uint mask) {
    return (((m | ~mask) + 1u) & mask) | (m & ~mask);
}

METAL_FUNC uint dec_axis(uint m, uint mask) {
    return (((m & mask) - 1u) & mask) | (m & ~mask);
}

kernel void morton_stencil(device const float* u_in  [[buffer(0)]],
                           device float*       u_out [[buffer(1)]],
                           constant uint&      N     [[buffer(2)]],
                           constant uint&      logN  [[buffer(3)]],
                           constant float&     alpha [[buffer(4)]],
                           uint tid [[thread_position_in_grid]])
{
    const uint total = 1u << (3u * logN);
    if (tid >= total) return;
    const uint x = compact1by2(tid);
    const uint y = compact1by2(tid >> 1);
    const uint z = compact1by2(tid >> 2);
    const float c = u_in[tid];
    const uint last = N - 1;
    if (x == 0 || y == 0 || z == 0 || x == last || y == last || z == last) {
        u_out[tid] = c;
        return;
    }
    const float s = u_in[dec_axis(tid, MASK_X)] + u_in[inc_axis(tid, MASK_X)]
                  + u_in[dec_axis(tid, MASK_Y)] + u_in[inc_axis(tid, MASK_Y)]
                  + u_in[dec_axis(tid, MASK_Z)] + u_in[inc_axis(tid, MASK_Z)];
    u_out[tid] = fma(alpha, s - 6.0f * c, c);
}
