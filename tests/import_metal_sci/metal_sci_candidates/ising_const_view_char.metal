#include <metal_stdlib>
using namespace metal;

// ising: neighbours read through a read-only view of the spin buffer and the
// acceptance table loaded into registers once; the step hash is hoisted
// (one mix per dispatch and colour, one per site). Only flipped spins are
// written, as in the seed.
inline uint mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

kernel void ising_step(device char*        spins    [[buffer(0)]],
                       device const float* p_accept [[buffer(1)]],
                       constant uint&      NX       [[buffer(2)]],
                       constant uint&      NY       [[buffer(3)]],
                       constant uint&      step_idx [[buffer(4)]],
                       constant uint&      seed     [[buffer(5)]],
                       ushort2 gid [[thread_position_in_grid]])
{
    const uint i = gid.x;
    const uint j = gid.y;
    if (i >= NX || j >= NY || ((i + j + step_idx) & 1u)) return;
    const device char* s_rd = spins;
    const uint site = j * NX + i;
    const int s = s_rd[site];
    const int h = s_rd[j * NX + (i == 0 ? NX - 1 : i - 1)]
                + s_rd[j * NX + (i == NX - 1 ? 0 : i + 1)]
                + s_rd[(j == 0 ? NY - 1 : j - 1) * NX + i]
                + s_rd[(j == NY - 1 ? 0 : j + 1) * NX + i];
    const float p3 = p_accept[3], p4 = p_accept[4];
    const int e = s * h;  // -4, -2, 0, 2, 4
    const float pa = (e <= 0) ? 1.0f : (e == 2 ? p3 : p4);
    const uint x = mix32(mix32(seed + step_idx * 0x9E3779B9u) ^ site);
    if (float(x >> 8) * (1.0f / 16777216.0f) < pa) {
        spins[site] = -s;
    }
}
