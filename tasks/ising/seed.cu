//! header
// Murmur3 finaliser used by the counter-based RNG.
__device__ inline uint32_t ising_mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

//! kernel ising_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per site. Inactive-colour threads copy their spin
// (MLX outputs are fresh arrays); active ones do 5 byte loads with explicit
// periodic index selects, a table lookup, the hash and a conditional flip.
// Scalars are 0-d inputs, bound as pointers: read once into locals.
const uint32_t nx = NX[0];
const uint32_t ny = NY[0];
const uint32_t step = step_idx[0];
const uint32_t rng_seed = seed[0];
uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
uint32_t j = blockIdx.y * blockDim.y + threadIdx.y;
if (i >= nx || j >= ny) {
    return;
}
uint32_t idx = j * nx + i;
int s = spins[idx];
if (((i + j) & 1u) != (step & 1u)) {
    spins_out[idx] = spins[idx];
    return;
}
uint32_t im = (i == 0) ? nx - 1 : i - 1;
uint32_t ip = (i == nx - 1) ? 0 : i + 1;
uint32_t jm = (j == 0) ? ny - 1 : j - 1;
uint32_t jp = (j == ny - 1) ? 0 : j + 1;
int h = spins[j * nx + im] + spins[j * nx + ip] + spins[jm * nx + i] + spins[jp * nx + i];
float pa = p_accept[(s * h + 4) / 2];
uint32_t x = rng_seed + step * 0x9E3779B9u;
x = ising_mix32(x);
x = ising_mix32(x ^ idx);
float u = (float)(x >> 8) * (1.0f / 16777216.0f);
spins_out[idx] = (u < pa) ? (int8_t)(-s) : (int8_t)s;
