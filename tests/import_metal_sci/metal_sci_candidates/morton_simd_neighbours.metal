#include <metal_stdlib>
using namespace metal;

// morton with simd shuffles: 32 consecutive Morton indices form a
// 4 (x) x 4 (y) x 2 (z) brick, so a neighbour whose index lies in the same
// brick is read from that lane's register (simd_shuffle) and only the others
// are loaded. Every lane shuffles before any thread returns.
#define MX 0x09249249u
#define MY 0x12492492u
#define MZ 0x24924924u

static inline uint spread_step(uint m, uint mask, bool up) {
    return up ? ((((m | ~mask) + 1u) & mask) | (m & ~mask))
              : ((((m & mask) - 1u) & mask) | (m & ~mask));
}

static inline float neighbour(device const float* u, float mine_in_brick, uint self, uint nb) {
    // mine_in_brick: the value simd_shuffle fetched from lane (nb & 31)
    return ((nb >> 5) == (self >> 5)) ? mine_in_brick : u[nb];
}

kernel void morton_stencil(device const float* u_in  [[buffer(0)]],
                           device float*       u_out [[buffer(1)]],
                           constant uint&      N     [[buffer(2)]],
                           constant uint&      logN  [[buffer(3)]],
                           constant float&     alpha [[buffer(4)]],
                           uint tid [[thread_position_in_grid]])
{
    const uint cells = N * N * N;
    const uint me = min(tid, cells - 1);
    const float c = u_in[me];
    uint x = 0, y = 0, z = 0;
    for (uint b = 0; b < logN; ++b) {
        x |= ((me >> (3 * b)) & 1u) << b;
        y |= ((me >> (3 * b + 1)) & 1u) << b;
        z |= ((me >> (3 * b + 2)) & 1u) << b;
    }
    const bool interior = x > 0 && y > 0 && z > 0 && x < N - 1 && y < N - 1 && z < N - 1;
    // neighbour indices (only meaningful for interior cells; wrapped otherwise)
    const uint nxm = spread_step(me, MX, false), nxp = spread_step(me, MX, true);
    const uint nym = spread_step(me, MY, false), nyp = spread_step(me, MY, true);
    const uint nzm = spread_step(me, MZ, false), nzp = spread_step(me, MZ, true);
    const float sxm = simd_shuffle(c, ushort(nxm & 31u));
    const float sxp = simd_shuffle(c, ushort(nxp & 31u));
    const float sym = simd_shuffle(c, ushort(nym & 31u));
    const float syp = simd_shuffle(c, ushort(nyp & 31u));
    const float szm = simd_shuffle(c, ushort(nzm & 31u));
    const float szp = simd_shuffle(c, ushort(nzp & 31u));
    if (tid >= cells) return;
    if (!interior) {
        u_out[tid] = c;
        return;
    }
    const float s = neighbour(u_in, sxm, me, nxm) + neighbour(u_in, sxp, me, nxp)
                  + neighbour(u_in, sym, me, nym) + neighbour(u_in, syp, me, nyp)
                  + neighbour(u_in, szm, me, nzm) + neighbour(u_in, szp, me, nzp);
    u_out[tid] = c + alpha * (s - 6.0f * c);
}
