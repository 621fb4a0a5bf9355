//! header
// Naive seed: radix-2 Cooley-Tukey per line, one threadgroup per line
// (threadgroup = N threads, thread t owns position t of the line).
// Load with bit-reversed index into threadgroup memory sized for the largest
// supported line (N <= FFT_MAX), log2(N) butterfly stages with a barrier per
// stage, twiddles by cos/sin per butterfly, only N/2 threads busy per stage;
// the y and z passes read and write with a stride of N and N*N.
// Grid (N, N, N): gid.y and gid.z pick the line, as CUDA caps grid y and z
// at 65535 blocks (a flat N*N line index in y would not fit for N > 255).
#define FFT_MAX 1024

inline float2 cmul(float2 a, float2 b) {
    return float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// One line of the transform, the same in all three passes: thread t loads
// point t of the line (`stride` apart from `base`) to its bit-reversed slot,
// then log2(n) butterfly stages, then stores point t.
inline void fft_line(threadgroup float2* buf, const device float2* src, device float2* dst,
                     uint base, uint stride, uint t, uint n) {
    uint logn = ctz(n);
    buf[reverse_bits(t) >> (32 - logn)] = src[base + t * stride];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint half_len = 1; half_len < n; half_len <<= 1) {
        if (t < n / 2) {
            uint pos = t % half_len;
            uint i0 = (t / half_len) * 2 * half_len + pos;
            uint i1 = i0 + half_len;
            float ang = -M_PI_F * float(pos) / float(half_len);
            float2 b = cmul(buf[i1], float2(cos(ang), sin(ang)));
            float2 a = buf[i0];
            buf[i0] = a + b;
            buf[i1] = a - b;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    dst[base + t * stride] = buf[t];
}

//! kernel fft3d_x
//! grid = (N, N, N)
//! threadgroup = (N, 1, 1)
threadgroup float2 buf[FFT_MAX];
uint t = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
uint k = thread_position_in_grid.z;
fft_line(buf, (const device float2*)in_data, (device float2*)out_data, (k * N + j) * N, 1, t, N);

//! kernel fft3d_y
//! grid = (N, N, N)
//! threadgroup = (N, 1, 1)
threadgroup float2 buf[FFT_MAX];
uint t = thread_position_in_grid.x;
uint i = thread_position_in_grid.y;
uint k = thread_position_in_grid.z;
fft_line(buf, (const device float2*)in_data, (device float2*)out_data, k * N * N + i, N, t, N);

//! kernel fft3d_z
//! grid = (N, N, N)
//! threadgroup = (N, 1, 1)
threadgroup float2 buf[FFT_MAX];
uint t = thread_position_in_grid.x;
uint i = thread_position_in_grid.y;
uint j = thread_position_in_grid.z;
fft_line(buf, (const device float2*)in_data, (device float2*)out_data, j * N + i, N * N, t, N);
