#include <metal_stdlib>
using namespace metal;

// ising with row pointers: the thread's own row is a writable pointer into
// the spin lattice (read for the site and its left/right neighbours, written
// for the flip), the rows above and below are read-only pointers; the
// periodic wrap is a select per axis and the step's hash half is hoisted.
static inline uint fmix(uint x) {
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
    const uint i = gid.x, j = gid.y;
    if (i >= NX || j >= NY || ((i + j) & 1u) != (step_idx & 1u)) return;
    device char* row = spins + j * NX;
    device const char* north = spins + ((j + 1 == NY) ? 0 : j + 1) * NX;
    device const char* south = &spins[((j == 0) ? NY - 1 : j - 1) * NX];
    const uint il = (i == 0) ? NX - 1 : i - 1;
    const uint ir = (i + 1 == NX) ? 0 : i + 1;
    const int s = row[i];
    const int h = row[il] + row[ir] + north[i] + south[i];
    const float pa = p_accept[(s * h + 4) >> 1];
    const uint x = fmix(fmix(seed + step_idx * 0x9E3779B9u) ^ (j * NX + i));
    if (float(x >> 8) * (1.0f / 16777216.0f) < pa) {
        row[i] = char(-s);
    }
}
