#include <metal_stdlib>
using namespace metal;

// adi3d: a threadgroup Thomas solver. The elimination coefficients depend
// only on μ and the line length, so thread 0 of each threadgroup computes
// c'_i and the reciprocal pivots 1/(b - a c'_{i-1}) once into threadgroup
// memory; every thread then runs a division-free forward sweep whose d'
// stays in a private array (no round trip of d' through u_out), and the back
// substitution writes each x_i exactly once.
#define MAX_AXIS 256

struct Tridiag {
    float a;  // sub-diagonal (-mu)
    float b;  // diagonal (1 + 2 mu)
    float c;  // super-diagonal (-mu)
};

static void factor(threadgroup float* cp, threadgroup float* rpiv, uint n, Tridiag m) {
    rpiv[1] = 1.0f / m.b;
    cp[1] = m.c * rpiv[1];
    for (uint i = 2; i + 1 < n; ++i) {
        rpiv[i] = 1.0f / (m.b - m.a * cp[i - 1]);
        cp[i] = m.c * rpiv[i];
    }
}

static void solve(device const float* u_in, device float* u_out, uint base, uint stride, uint n,
                  float mu, Tridiag m, threadgroup const float* cp,
                  threadgroup const float* rpiv) {
    float dp[MAX_AXIS];
    const float r0 = u_in[base];
    const float rn = u_in[base + (n - 1) * stride];
    float prev = 0.0f;
    for (uint i = 1; i + 1 < n; ++i) {
        float r = u_in[base + i * stride];
        if (i == 1) r += mu * r0;
        if (i + 2 == n) r += mu * rn;
        prev = (r - m.a * prev) * rpiv[i];
        dp[i] = prev;
    }
    u_out[base] = r0;
    u_out[base + (n - 1) * stride] = rn;
    float x = dp[n - 2];
    u_out[base + (n - 2) * stride] = x;
    for (uint i = n - 3; i >= 1; --i) {
        x = dp[i] - cp[i] * x;
        u_out[base + i * stride] = x;
    }
}

static void copy_line(device const float* u_in, device float* u_out, uint base, uint stride, uint n) {
    for (uint i = 0; i < n; ++i) u_out[base + i * stride] = u_in[base + i * stride];
}

kernel void adi_x(device const float* u_in  [[buffer(0)]],
                  device float*       u_out [[buffer(1)]],
                  constant uint&      NX    [[buffer(2)]],
                  constant uint&      NY    [[buffer(3)]],
                  constant uint&      NZ    [[buffer(4)]],
                  constant float&     mu    [[buffer(5)]],
                  uint2  gid  [[thread_position_in_grid]],
                  ushort tlid [[thread_index_in_threadgroup]])
{
    threadgroup float cp[MAX_AXIS], rpiv[MAX_AXIS];
    const Tridiag m = {-mu, 1.0f + 2.0f * mu, -mu};
    if (tlid == 0) factor(cp, rpiv, NX, m);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint j = gid.x, k = gid.y;
    if (j >= NY || k >= NZ) return;
    const uint base = (k * NY + j) * NX;
    if (j == 0 || k == 0 || j == NY - 1 || k == NZ - 1) {
        copy_line(u_in, u_out, base, 1, NX);
    } else {
        solve(u_in, u_out, base, 1, NX, mu, m, cp, rpiv);
    }
}

kernel void adi_y(device const float* u_in  [[buffer(0)]],
                  device float*       u_out [[buffer(1)]],
                  constant uint&      NX    [[buffer(2)]],
                  constant uint&      NY    [[buffer(3)]],
                  constant uint&      NZ    [[buffer(4)]],
                  constant float&     mu    [[buffer(5)]],
                  uint2  gid  [[thread_position_in_grid]],
                  ushort tlid [[thread_index_in_threadgroup]])
{
    threadgroup float cp[MAX_AXIS], rpiv[MAX_AXIS];
    const Tridiag m = {-mu, 1.0f + 2.0f * mu, -mu};
    if (tlid == 0) factor(cp, rpiv, NY, m);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint i = gid.x, k = gid.y;
    if (i >= NX || k >= NZ) return;
    const uint base = k * NY * NX + i;
    if (i == 0 || k == 0 || i == NX - 1 || k == NZ - 1) {
        copy_line(u_in, u_out, base, NX, NY);
    } else {
        solve(u_in, u_out, base, NX, NY, mu, m, cp, rpiv);
    }
}

kernel void adi_z(device const float* u_in  [[buffer(0)]],
                  device float*       u_out [[buffer(1)]],
                  constant uint&      NX    [[buffer(2)]],
                  constant uint&      NY    [[buffer(3)]],
                  constant uint&      NZ    [[buffer(4)]],
                  constant float&     mu    [[buffer(5)]],
                  uint2  gid  [[thread_position_in_grid]],
                  ushort tlid [[thread_index_in_threadgroup]])
{
    threadgroup float cp[MAX_AXIS], rpiv[MAX_AXIS];
    const Tridiag m = {-mu, 1.0f + 2.0f * mu, -mu};
    if (tlid == 0) factor(cp, rpiv, NZ, m);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const uint i = gid.x, j = gid.y;
    if (i >= NX || j >= NY) return;
    const uint base = j * NX + i;
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        copy_line(u_in, u_out, base, NX * NY, NZ);
    } else {
        solve(u_in, u_out, base, NX * NY, NZ, mu, m, cp, rpiv);
    }
}
