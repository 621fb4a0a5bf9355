#include <metal_stdlib>
using namespace metal;

// fft3d: radix-2 decimation in time with one element per thread held in a
// register. After a bit-reversed load, the stages whose butterfly partner is
// less than 32 apart exchange values with simd_shuffle_xor (no threadgroup
// memory, no barrier); only the stages with a span of 32 or more go through
// threadgroup memory. Every thread computes its own output each stage.
#define MAX_N 1024
#define SIMD_W 32u

static inline uint bit_reverse(uint v, uint bits) {
    return reverse_bits(v) >> (32u - bits);
}

static inline float2 butterfly(float2 mine, float2 other, uint t, uint h) {
    const uint k = t & (h - 1u);
    float c;
    const float s = sincos(-M_PI_F * float(k) / float(h), c);
    const bool upper = (t & h) != 0u;
    const float2 lo = upper ? other : mine;
    const float2 hi = upper ? mine : other;
    const float2 w_hi = float2(c * hi.x - s * hi.y, c * hi.y + s * hi.x);
    return upper ? lo - w_hi : lo + w_hi;
}

static inline float2 fft_register(float2 x, uint t, uint n, threadgroup float2* s) {
    for (uint h = 1; h < n; h <<= 1) {
        float2 other;
        if (h < SIMD_W) {
            other = simd_shuffle_xor(x, ushort(h));
        } else {
            s[t] = x;
            threadgroup_barrier(mem_flags::mem_threadgroup);
            other = s[t ^ h];
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        x = butterfly(x, other, t, h);
    }
    return x;
}

kernel void fft3d_x(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 s[MAX_N];
    const uint t = gid.x, bits = ctz(N);
    const uint base = ((gid.y / N) * N + gid.y % N) * N;
    const float2 x = in_data[base + bit_reverse(t, bits)];
    out_data[base + t] = fft_register(x, t, N, s);
}

kernel void fft3d_y(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 s[MAX_N];
    const uint t = gid.x, bits = ctz(N);
    const uint base = (gid.y / N) * N * N + gid.y % N;
    const float2 x = in_data[base + bit_reverse(t, bits) * N];
    out_data[base + t * N] = fft_register(x, t, N, s);
}

kernel void fft3d_z(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 s[MAX_N];
    const uint t = gid.x, bits = ctz(N);
    const uint base = (gid.y / N) * N + gid.y % N;
    const float2 x = in_data[base + bit_reverse(t, bits) * N * N];
    out_data[base + t * N * N] = fft_register(x, t, N, s);
}
