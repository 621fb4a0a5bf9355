//! header
// Naive seed: one thread per line. Thread 0 of each block fills the c'
// coefficients of the line length serially in shared memory, then every
// thread does a serial Thomas solve of its line, streaming d' through u_out
// in device memory and reading it back for the back substitution (about
// twice the ideal traffic). Lines whose off-axis indices touch a face copy
// u_in to u_out. The barrier comes before the bounds check, so the extra
// threads of the last (whole) block reach it too.
#define MAX_AXIS 256

// c'_0 = 0, c'_1 = c/b, c'_i = c/(b - a c'_{i-1}) with a = c = -mu, b = 1 + 2 mu.
__device__ inline void fill_cprime(float* cprime, uint32_t n, float mu) {
    float a = -mu;
    float b = 1.0f + 2.0f * mu;
    cprime[0] = 0.0f;
    for (uint32_t i = 1; i + 1 < n; ++i) {
        cprime[i] = -mu / (b - a * cprime[i - 1]);
    }
}

// Solves (I - mu D2) x = r on the line base + i*stride, 0 <= i < n, with
// Dirichlet endpoints x_0 = r_0, x_{n-1} = r_{n-1}.
__device__ inline void solve_line(const float* u_in, float* u_out, uint32_t base,
                                  uint32_t stride, uint32_t n, float mu, const float* cprime) {
    float a = -mu;
    float b = 1.0f + 2.0f * mu;
    float r0 = u_in[base];
    float rl = u_in[base + (n - 1) * stride];
    u_out[base] = r0;
    u_out[base + (n - 1) * stride] = rl;
    float d = 0.0f;
    for (uint32_t i = 1; i + 1 < n; ++i) {
        float r = u_in[base + i * stride];
        if (i == 1) {
            r += mu * r0;
        }
        if (i == n - 2) {
            r += mu * rl;
        }
        d = (r - a * d) / (b - a * cprime[i - 1]);
        u_out[base + i * stride] = d;
    }
    float x = d;
    for (uint32_t i = n - 2; i-- > 1;) {
        x = u_out[base + i * stride] - cprime[i] * x;
        u_out[base + i * stride] = x;
    }
}

__device__ inline void copy_line(const float* u_in, float* u_out, uint32_t base,
                                 uint32_t stride, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        u_out[base + i * stride] = u_in[base + i * stride];
    }
}

//! kernel adi_x
//! grid = (NY, NZ, 1)
//! threadgroup = (32, 1, 1)
__shared__ float cprime[MAX_AXIS];
const uint32_t nx = NX[0];
const uint32_t ny = NY[0];
const uint32_t nz = NZ[0];
const float mu_v = mu[0];
uint32_t lid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
if (lid == 0) {
    fill_cprime(cprime, nx, mu_v);
}
__syncthreads();
uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t k = blockIdx.y * blockDim.y + threadIdx.y;
if (j >= ny || k >= nz) {
    return;
}
uint32_t base = (k * ny + j) * nx;
if (j == 0 || k == 0 || j == ny - 1 || k == nz - 1) {
    copy_line(u_in, u_out, base, 1, nx);
    return;
}
solve_line(u_in, u_out, base, 1, nx, mu_v, cprime);

//! kernel adi_y
//! grid = (NX, NZ, 1)
//! threadgroup = (32, 1, 1)
__shared__ float cprime[MAX_AXIS];
const uint32_t nx = NX[0];
const uint32_t ny = NY[0];
const uint32_t nz = NZ[0];
const float mu_v = mu[0];
uint32_t lid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
if (lid == 0) {
    fill_cprime(cprime, ny, mu_v);
}
__syncthreads();
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t k = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= nx || k >= nz) {
    return;
}
uint32_t base = k * ny * nx + i;
if (i == 0 || k == 0 || i == nx - 1 || k == nz - 1) {
    copy_line(u_in, u_out, base, nx, ny);
    return;
}
solve_line(u_in, u_out, base, nx, ny, mu_v, cprime);

//! kernel adi_z
//! grid = (NX, NY, 1)
//! threadgroup = (32, 1, 1)
__shared__ float cprime[MAX_AXIS];
const uint32_t nx = NX[0];
const uint32_t ny = NY[0];
const uint32_t nz = NZ[0];
const float mu_v = mu[0];
uint32_t lid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
if (lid == 0) {
    fill_cprime(cprime, nz, mu_v);
}
__syncthreads();
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= nx || j >= ny) {
    return;
}
uint32_t base = j * nx + i;
if (i == 0 || j == 0 || i == nx - 1 || j == ny - 1) {
    copy_line(u_in, u_out, base, nx * ny, nz);
    return;
}
solve_line(u_in, u_out, base, nx * ny, nz, mu_v, cprime);
