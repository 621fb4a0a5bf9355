#include <metal_stdlib>
using namespace metal;

// ising, branchless: spins are read as bytes (uchar: +1 = 0x01, -1 = 0xFF),
// so the sign bit of each neighbour counts the -1s (h = 4 - 2 * negatives)
// without sign extension; the flip is a multiply by +-1 and every active
// site is stored unconditionally (no divergent store). Threads of the other
// colour leave at once.
#define GOLDEN 0x9E3779B9u
#define INV_2_24 (1.0f / 16777216.0f)

static inline uint fmix32(uint h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

kernel void ising_step(device uchar*       spins    [[buffer(0)]],
                       device const float* p_accept [[buffer(1)]],
                       constant uint&      NX       [[buffer(2)]],
                       constant uint&      NY       [[buffer(3)]],
                       constant uint&      step_idx [[buffer(4)]],
                       constant uint&      seed     [[buffer(5)]],
                       uint2 gid [[thread_position_in_grid]])
{
    const uint i = gid.x, j = gid.y;
    if (i >= NX || j >= NY) return;
    if (((i ^ j ^ step_idx) & 1u) != 0u) return;   // (i + j) & 1 == colour
    const uint row = j * NX;
    const uint site = row + i;
    const uint left  = row + ((i == 0) ? NX - 1 : i - 1);
    const uint right = row + ((i + 1 == NX) ? 0 : i + 1);
    const uint down  = ((j == 0) ? NY - 1 : j - 1) * NX + i;
    const uint up    = ((j + 1 == NY) ? 0 : j + 1) * NX + i;
    const uint negatives = (uint(spins[left]) >> 7) + (uint(spins[right]) >> 7)
                         + (uint(spins[down]) >> 7) + (uint(spins[up]) >> 7);
    const int h = 4 - 2 * int(negatives);
    const int s = 1 - 2 * int(uint(spins[site]) >> 7);
    const float pa = p_accept[(s * h + 4) >> 1];
    const uint x = fmix32(fmix32(seed + step_idx * GOLDEN) ^ site);
    const float u = float(x >> 8) * INV_2_24;
    const int flip = int(u < pa);
    spins[site] = uchar(s * (1 - 2 * flip));
}
