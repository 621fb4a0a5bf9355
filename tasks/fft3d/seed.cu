//! header
// Naive seed: radix-2 Cooley-Tukey per line, one block per line
// (block = N threads, thread t owns position t of the line).
// Load with bit-reversed index into shared memory sized for the largest
// supported line (N <= FFT_MAX), log2(N) butterfly stages with a barrier per
// stage, twiddles by cosf/sinf per butterfly, only N/2 threads busy per stage;
// the y and z passes read and write with a stride of N and N*N.
// The grid (N, N, N) is a whole number of (N, 1, 1) blocks, so every
// launched thread owns a point: there is no edge to guard. blockIdx.y and
// blockIdx.z pick the line, as gridDim.y and gridDim.z are capped at 65535
// blocks (a flat N*N line index in y would not fit for N > 255).
#define FFT_MAX 1024
#define FFT_PI_F 3.14159265358979323846f

// CUDA's float2 has no operators: complex helpers.
__device__ inline float2 cadd(float2 a, float2 b) {
    return make_float2(a.x + b.x, a.y + b.y);
}

__device__ inline float2 csub(float2 a, float2 b) {
    return make_float2(a.x - b.x, a.y - b.y);
}

__device__ inline float2 cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// One line of the transform, the same in all three passes: thread t loads
// point t of the line (`stride` apart from `base`) to its bit-reversed slot,
// then log2(n) butterfly stages, then stores point t.
__device__ inline void fft_line(float2* buf, const float2* src, float2* dst,
                                uint32_t base, uint32_t stride, uint32_t t, uint32_t n) {
    uint32_t logn = __ffs(n) - 1;
    buf[__brev(t) >> (32 - logn)] = src[base + t * stride];
    __syncthreads();
    for (uint32_t half_len = 1; half_len < n; half_len <<= 1) {
        if (t < n / 2) {
            uint32_t pos = t % half_len;
            uint32_t i0 = (t / half_len) * 2 * half_len + pos;
            uint32_t i1 = i0 + half_len;
            float ang = -FFT_PI_F * (float)pos / (float)half_len;
            float2 b = cmul(buf[i1], make_float2(cosf(ang), sinf(ang)));
            float2 a = buf[i0];
            buf[i0] = cadd(a, b);
            buf[i1] = csub(a, b);
        }
        __syncthreads();
    }
    dst[base + t * stride] = buf[t];
}

//! kernel fft3d_x
//! grid = (N, N, N)
//! threadgroup = (N, 1, 1)
__shared__ float2 buf[FFT_MAX];
const uint32_t n = N[0];
uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
uint32_t k = blockIdx.z * blockDim.z + threadIdx.z;
fft_line(buf, reinterpret_cast<const float2*>(in_data), reinterpret_cast<float2*>(out_data),
         (k * n + j) * n, 1, t, n);

//! kernel fft3d_y
//! grid = (N, N, N)
//! threadgroup = (N, 1, 1)
__shared__ float2 buf[FFT_MAX];
const uint32_t n = N[0];
uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t i = blockIdx.y * blockDim.y + threadIdx.y;
uint32_t k = blockIdx.z * blockDim.z + threadIdx.z;
fft_line(buf, reinterpret_cast<const float2*>(in_data), reinterpret_cast<float2*>(out_data),
         k * n * n + i, n, t, n);

//! kernel fft3d_z
//! grid = (N, N, N)
//! threadgroup = (N, 1, 1)
__shared__ float2 buf[FFT_MAX];
const uint32_t n = N[0];
uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t i = blockIdx.y * blockDim.y + threadIdx.y;
uint32_t j = blockIdx.z * blockDim.z + threadIdx.z;
fft_line(buf, reinterpret_cast<const float2*>(in_data), reinterpret_cast<float2*>(out_data),
         j * n + i, n * n, t, n);
