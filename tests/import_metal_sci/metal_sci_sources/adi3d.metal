#include <metal_stdlib>
using namespace metal;

// adi3d seed: one thread per line of the active axis. Thread 0 of each
// threadgroup fills the c' coefficients serially in threadgroup memory, a
// barrier (before the bounds check), then a serial Thomas solve that streams
// d' through u_out in device memory and reads it back for the back
// substitution. Lines touching a face in their off-axis indices are copied.
#define MAX_AXIS 256

static void fill_cprime(threadgroup float* cp, uint n, float mu) {
    float a = -mu, b = 1.0f + 2.0f * mu, c = -mu;
    cp[1] = c / b;
    for (uint i = 2; i + 1 < n; ++i) {
        cp[i] = c / (b - a * cp[i - 1]);
    }
}

static void thomas(device const float* u_in, device float* u_out, uint base, uint stride,
                   uint n, float mu, threadgroup const float* cp) {
    float a = -mu, b = 1.0f + 2.0f * mu;
    float r0 = u_in[base];
    float rn = u_in[base + (n - 1) * stride];
    u_out[base] = r0;
    u_out[base + (n - 1) * stride] = rn;
    float dprev = 0.0f;
    for (uint i = 1; i + 1 < n; ++i) {
        float r = u_in[base + i * stride];
        if (i == 1) r += mu * r0;
        if (i == n - 2) r += mu * rn;
        float den = (i == 1) ? b : b - a * cp[i - 1];
        float dcur = (r - a * dprev) / den;
        u_out[base + i * stride] = dcur;
        dprev = dcur;
    }
    float x = dprev;
    for (uint i = n - 2; i > 1; --i) {
        x = u_out[base + (i - 1) * stride] - cp[i - 1] * x;
        u_out[base + (i - 1) * stride] = x;
    }
}

static void copy_line(device const float* u_in, device float* u_out, uint base, uint stride, uint n) {
    for (uint i = 0; i < n; ++i) {
        u_out[base + i * stride] = u_in[base + i * stride];
    }
}

kernel void adi_x(device const float* u_in  [[buffer(0)]],
                  device float*       u_out [[buffer(1)]],
                  constant uint&      NX    [[buffer(2)]],
                  constant uint&      NY    [[buffer(3)]],
                  constant uint&      NZ    [[buffer(4)]],
                  constant float&     mu    [[buffer(5)]],
                  uint2 gid  [[thread_position_in_grid]],
                  uint  tlid [[thread_index_in_threadgroup]])
{
    threadgroup float cp[MAX_AXIS];
    if (tlid == 0) fill_cprime(cp, NX, mu);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint j = gid.x, k = gid.y;
    if (j >= NY || k >= NZ) return;
    uint base = (k * NY + j) * NX;
    if (j == 0 || k == 0 || j == NY - 1 || k == NZ - 1) {
        copy_line(u_in, u_out, base, 1, NX);
        return;
    }
    thomas(u_in, u_out, base, 1, NX, mu, cp);
}

kernel void adi_y(device const float* u_in  [[buffer(0)]],
                  device float*       u_out [[buffer(1)]],
                  constant uint&      NX    [[buffer(2)]],
                  constant uint&      NY    [[buffer(3)]],
                  constant uint&      NZ    [[buffer(4)]],
                  constant float&     mu    [[buffer(5)]],
                  uint2 gid  [[thread_position_in_grid]],
                  uint  tlid [[thread_index_in_threadgroup]])
{
    threadgroup float cp[MAX_AXIS];
    if (tlid == 0) fill_cprime(cp, NY, mu);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint i = gid.x, k = gid.y;
    if (i >= NX || k >= NZ) return;
    uint base = k * NY * NX + i;
    if (i == 0 || k == 0 || i == NX - 1 || k == NZ - 1) {
        copy_line(u_in, u_out, base, NX, NY);
        return;
    }
    thomas(u_in, u_out, base, NX, NY, mu, cp);
}

kernel void adi_z(device const float* u_in  [[buffer(0)]],
                  device float*       u_out [[buffer(1)]],
                  constant uint&      NX    [[buffer(2)]],
                  constant uint&      NY    [[buffer(3)]],
                  constant uint&      NZ    [[buffer(4)]],
                  constant float&     mu    [[buffer(5)]],
                  uint2 gid  [[thread_position_in_grid]],
                  uint  tlid [[thread_index_in_threadgroup]])
{
    threadgroup float cp[MAX_AXIS];
    if (tlid == 0) fill_cprime(cp, NZ, mu);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint i = gid.x, j = gid.y;
    if (i >= NX || j >= NY) return;
    uint base = j * NX + i;
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        copy_line(u_in, u_out, base, NX * NY, NZ);
        return;
    }
    thomas(u_in, u_out, base, NX * NY, NZ, mu, cp);
}
