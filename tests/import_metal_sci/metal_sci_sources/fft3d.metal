#include <metal_stdlib>
using namespace metal;

// fft3d seed: radix-2 Cooley-Tukey per line. The host launches grid
// (N, N*N, 1) with threadgroups of (N, 1, 1): one threadgroup per line,
// gid.x = position along the transform axis, gid.y picks the line.
// Bit-reversed load into threadgroup memory, log2(N) butterfly stages with a
// barrier per stage, twiddles by cos/sin per butterfly, N/2 threads busy.
#define MAX_N 1024

static inline uint reverse_low_bits(uint v, uint bits) {
    uint r = 0;
    for (uint b = 0; b < bits; ++b) {
        r = (r << 1) | (v & 1u);
        v >>= 1;
    }
    return r;
}

static void fft_line(threadgroup float2* s, device const float2* src, device float2* dst,
                     uint base, uint stride, uint t, uint n) {
    uint bits = 0;
    while ((1u << bits) < n) {
        ++bits;
    }
    s[reverse_low_bits(t, bits)] = src[base + t * stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint len = 2; len <= n; len <<= 1) {
        uint hl = len >> 1;
        if (t < n / 2) {
            uint k = t % hl;
            uint a = (t / hl) * len + k;
            uint b = a + hl;
            float ang = -2.0f * M_PI_F * float(k) / float(len);
            float2 w = float2(cos(ang), sin(ang));
            float2 x = s[b];
            float2 tw = float2(x.x * w.x - x.y * w.y, x.x * w.y + x.y * w.x);
            float2 u = s[a];
            s[a] = u + tw;
            s[b] = u - tw;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    dst[base + t * stride] = s[t];
}

kernel void fft3d_x(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 sbuf[MAX_N];
    uint k = gid.y / N;
    uint j = gid.y % N;
    fft_line(sbuf, in_data, out_data, (k * N + j) * N, 1, gid.x, N);
}

kernel void fft3d_y(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 sbuf[MAX_N];
    uint k = gid.y / N;
    uint i = gid.y % N;
    fft_line(sbuf, in_data, out_data, k * N * N + i, N, gid.x, N);
}

kernel void fft3d_z(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 sbuf[MAX_N];
    uint j = gid.y / N;
    uint i = gid.y % N;
    fft_line(sbuf, in_data, out_data, j * N + i, N * N, gid.x, N);
}
