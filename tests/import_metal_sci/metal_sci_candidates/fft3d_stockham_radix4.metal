#include <metal_stdlib>
using namespace metal;

// fft3d: Stockham autosort FFT per line in threadgroup memory, radix 4
// (one radix-2 stage first when log2(N) is odd), so a line takes
// ceil(log2(N)/2) barriers instead of log2(N) and no bit-reversal pass.
// The N twiddles exp(-2 pi i k / N) are computed once per threadgroup into a
// table (one sincos per thread) and every stage indexes it with a stride.
// 2 x 8 KB ping-pong buffers + 8 KB twiddles = 24 KB of threadgroup memory.
#define MAX_N 1024

static inline float2 cmul(float2 a, float2 b) {
    return float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

static inline float2 mul_minus_i(float2 a) {
    return float2(a.y, -a.x);
}

struct Line {
    uint base;
    uint stride;
};

static void fft_line(device const float2* src, device float2* dst, Line line, uint t, uint n,
                     threadgroup float2* a, threadgroup float2* b, threadgroup float2* tw) {
    a[t] = src[line.base + t * line.stride];
    float c;
    const float s = sincos(-2.0f * M_PI_F * float(t) / float(n), c);
    tw[t] = float2(c, s);
    threadgroup_barrier(mem_flags::mem_threadgroup);

    uint ns = 1;
    if (ctz(n) & 1u) {  // radix-2 stage: Ns = 1, no twiddles
        if (t < n / 2) {
            const float2 v0 = a[t], v1 = a[t + n / 2];
            b[2 * t] = v0 + v1;
            b[2 * t + 1] = v0 - v1;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        threadgroup float2* tmp = a;
        a = b;
        b = tmp;
        ns = 2;
    }
    const uint q = n / 4;
    for (; ns < n; ns *= 4) {
        if (t < q) {
            const uint k = t & (ns - 1);
            const uint step = n / (4 * ns);
            float2 v0 = a[t], v1 = a[t + q], v2 = a[t + 2 * q], v3 = a[t + 3 * q];
            v1 = cmul(v1, tw[k * step]);
            v2 = cmul(v2, tw[2 * k * step]);
            v3 = cmul(v3, tw[3 * k * step]);
            const float2 s0 = v0 + v2, s1 = v0 - v2;
            const float2 s2 = v1 + v3, s3 = mul_minus_i(v1 - v3);
            const uint o = (t - k) * 4 + k;
            b[o] = s0 + s2;
            b[o + ns] = s1 + s3;
            b[o + 2 * ns] = s0 - s2;
            b[o + 3 * ns] = s1 - s3;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        threadgroup float2* tmp = a;
        a = b;
        b = tmp;
    }
    dst[line.base + t * line.stride] = a[t];
}

[[max_total_threads_per_threadgroup(MAX_N)]]
kernel void fft3d_x(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 a[MAX_N], b[MAX_N], tw[MAX_N];
    const uint k = gid.y / N, j = gid.y % N;
    fft_line(in_data, out_data, Line{(k * N + j) * N, 1}, gid.x, N, a, b, tw);
}

[[max_total_threads_per_threadgroup(MAX_N)]]
kernel void fft3d_y(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 a[MAX_N], b[MAX_N], tw[MAX_N];
    const uint k = gid.y / N, i = gid.y % N;
    fft_line(in_data, out_data, Line{k * N * N + i, N}, gid.x, N, a, b, tw);
}

[[max_total_threads_per_threadgroup(MAX_N)]]
kernel void fft3d_z(device const float2* in_data  [[buffer(0)]],
                    device float2*       out_data [[buffer(1)]],
                    constant uint&       N        [[buffer(2)]],
                    uint3 gid [[thread_position_in_grid]])
{
    threadgroup float2 a[MAX_N], b[MAX_N], tw[MAX_N];
    const uint j = gid.y / N, i = gid.y % N;
    fft_line(in_data, out_data, Line{j * N + i, N * N}, gid.x, N, a, b, tw);
}
