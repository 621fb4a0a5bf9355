#include <metal_stdlib>
using namespace metal;

// ising seed: checkerboard Metropolis sub-pass, in place on one spin buffer.
// One thread per site; threads of the other colour return at once; five byte
// loads with explicit periodic selects, a table lookup, the hash, and a
// conditional byte store (only a flipped spin is written).

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
                       uint2 gid [[thread_position_in_grid]])
{
    uint i = gid.x;
    uint j = gid.y;
    if (i >= NX || j >= NY) return;
    if (((i + j) & 1u) != (step_idx & 1u)) return;
    uint site = j * NX + i;
    uint il = (i == 0) ? NX - 1 : i - 1;
    uint ir = (i == NX - 1) ? 0 : i + 1;
    uint jd = (j == 0) ? NY - 1 : j - 1;
    uint ju = (j == NY - 1) ? 0 : j + 1;
    int s = spins[site];
    int h = spins[j * NX + il] + spins[j * NX + ir] + spins[jd * NX + i] + spins[ju * NX + i];
    float pa = p_accept[(s * h + 4) / 2];
    uint x = seed + step_idx * 0x9E3779B9u;
    x = mix32(x);
    x = mix32(x ^ site);
    float u = float(x >> 8) * (1.0f / 16777216.0f);
    if (u < pa) {
        spins[site] = char(-s);
    }
}
