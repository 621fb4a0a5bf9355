//! header
// Bit-loop Morton helpers: bit b of x, y, z sits at bits 3b, 3b+1, 3b+2.
__device__ inline uint32_t morton_encode(uint32_t x, uint32_t y, uint32_t z, uint32_t logN) {
    uint32_t m = 0;
    for (uint32_t b = 0; b < logN; ++b) {
        m |= ((x >> b) & 1u) << (3u * b);
        m |= ((y >> b) & 1u) << (3u * b + 1u);
        m |= ((z >> b) & 1u) << (3u * b + 2u);
    }
    return m;
}

__device__ inline uint3 morton_decode(uint32_t m, uint32_t logN) {
    uint3 p = make_uint3(0, 0, 0);
    for (uint32_t b = 0; b < logN; ++b) {
        p.x |= ((m >> (3u * b)) & 1u) << b;
        p.y |= ((m >> (3u * b + 1u)) & 1u) << b;
        p.z |= ((m >> (3u * b + 2u)) & 1u) << b;
    }
    return p;
}

//! kernel morton_stencil
//! grid = (ceil_div(N * N * N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// Naive seed: decode tid bit by bit, re-encode each of the six neighbours bit
// by bit, seven global loads.
const uint32_t n = N[0];
const uint32_t log_n = logN[0];
const float a = alpha[0];
uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
if (tid >= n * n * n) {
    return;
}
uint3 p = morton_decode(tid, log_n);
float c = u_in[tid];
if (p.x == 0 || p.y == 0 || p.z == 0 || p.x == n - 1 || p.y == n - 1 || p.z == n - 1) {
    u_out[tid] = c;
    return;
}
float xm = u_in[morton_encode(p.x - 1, p.y, p.z, log_n)];
float xp = u_in[morton_encode(p.x + 1, p.y, p.z, log_n)];
float ym = u_in[morton_encode(p.x, p.y - 1, p.z, log_n)];
float yp = u_in[morton_encode(p.x, p.y + 1, p.z, log_n)];
float zm = u_in[morton_encode(p.x, p.y, p.z - 1, log_n)];
float zp = u_in[morton_encode(p.x, p.y, p.z + 1, log_n)];
u_out[tid] = c + a * (xm + xp + ym + yp + zm + zp - 6.0f * c);
