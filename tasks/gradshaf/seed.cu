//! kernel gradshaf_axis_reduce
//! grid = (256, 1, 1)
//! threadgroup = (256, 1, 1)
// Naive seed: one block; each thread takes a strided max over the
// flattened interior, then a tree reduction in shared memory with a
// barrier per level (assumes a power-of-two block width <= 256).
__shared__ float partial[256];
const uint32_t nr = NR[0];
const uint32_t nz = NZ[0];
uint32_t tid = threadIdx.x;
uint32_t tgsize = blockDim.x;
uint32_t nri = nr - 2;
uint32_t total = nri * (nz - 2);
float m = -3.402823466e+38f;   // -FLT_MAX
for (uint32_t n = tid; n < total; n += tgsize) {
    uint32_t j = 1 + n / nri;
    uint32_t i = 1 + n % nri;
    m = fmaxf(m, psi[j * nr + i]);
}
partial[tid] = m;
__syncthreads();
for (uint32_t s = tgsize / 2; s > 0; s >>= 1) {
    if (tid < s) {
        partial[tid] = fmaxf(partial[tid], partial[tid + s]);
    }
    __syncthreads();
}
if (tid == 0) {
    psi_axis[0] = partial[0];
}

//! kernel gradshaf_step
//! grid = (ceil_div(NR, 16) * 16, ceil_div(NZ, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per cell, coefficients recomputed per thread,
// five direct global loads.
const uint32_t nr = NR[0];
const uint32_t nz = NZ[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= nr || j >= nz) {
    return;
}
uint32_t idx = j * nr + i;
float c = psi_in[idx];
if (i == 0 || j == 0 || i == nr - 1 || j == nz - 1) {
    psi_out[idx] = c;
    return;
}
float dr = dR[0];
float dz = dZ[0];
float R = Rmin[0] + (float)i * dr;
float psin = c / psi_axis[0];
float J = 0.0f;
if (psin > 0.0f && psin < 1.0f) {
    J = R * p_axis[0] * 4.0f * psin * (1.0f - psin);
}
float rhs = -mu0[0] * R * J;
float idR2 = 1.0f / (dr * dr);
float idZ2 = 1.0f / (dz * dz);
float half_r = 1.0f / (2.0f * R * dr);
float aW = idR2 + half_r;
float aE = idR2 - half_r;
float aN = idZ2;
float aS = idZ2;
float aC = -2.0f * idR2 - 2.0f * idZ2;
float lap = aW * psi_in[idx - 1] + aE * psi_in[idx + 1]
          + aN * psi_in[idx + nr] + aS * psi_in[idx - nr] + aC * c;
psi_out[idx] = c + omega[0] * (rhs - lap) / aC;
