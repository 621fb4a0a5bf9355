#include <metal_stdlib>
using namespace metal;

// ising: the neighbour sum lives in a helper that reads the lattice through
// a pointer to const (periodic indices with selects); the Metropolis test
// uses the host's table and the counter hash, and a flipped spin is written
// back in place.
struct Lattice {
    uint nx;
    uint ny;
};

static inline uint hash32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    return x ^ (x >> 16);
}

static inline int neighbour_sum(device const char* s, Lattice g, uint i, uint j) {
    const uint il = (i == 0) ? g.nx - 1 : i - 1;
    const uint ir = (i + 1 == g.nx) ? 0 : i + 1;
    const uint jd = (j == 0) ? g.ny - 1 : j - 1;
    const uint ju = (j + 1 == g.ny) ? 0 : j + 1;
    return int(s[j * g.nx + il]) + int(s[j * g.nx + ir]) + int(s[jd * g.nx + i])
         + int(s[ju * g.nx + i]);
}

kernel void ising_step(device char*        spins    [[buffer(0)]],
                       device const float* p_accept [[buffer(1)]],
                       constant uint&      NX       [[buffer(2)]],
                       constant uint&      NY       [[buffer(3)]],
                       constant uint&      step_idx [[buffer(4)]],
                       constant uint&      seed     [[buffer(5)]],
                       uint2 gid [[thread_position_in_grid]])
{
    if (gid.x >= NX || gid.y >= NY) return;
    if (((gid.x + gid.y) & 1u) != (step_idx & 1u)) return;
    const Lattice g = {NX, NY};
    const uint site = gid.y * NX + gid.x;
    const int s = spins[site];
    const int h = neighbour_sum(spins, g, gid.x, gid.y);
    const float pa = p_accept[(s * h + 4) / 2];
    const uint x = hash32(hash32(seed + step_idx * 0x9E3779B9u) ^ site);
    if (float(x >> 8) * (1.0f / 16777216.0f) < pa) {
        spins[site] = char(-s);
    }
}
