//! header
// Transfer fixture (grade B through a fault): the hmc seed, except that it
// loads a chain's position at a width fixed at compile time, instantiated for
// the in-distribution dimensions. At d = 24 (the held-out) it takes the
// 32-wide load, so the last chain reads 8 elements past the end of q_in: the
// simulator names the out-of-bounds read; an Apple GPU read them silently.

// Murmur3 finaliser and the hmc counter-based uniform (24 bits, exact in fp32).
__device__ inline uint32_t hmc_mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

__device__ inline float hmc_uniform(uint32_t key, uint32_t counter) {
    uint32_t x = hmc_mix32(key ^ counter);
    x = hmc_mix32(x);
    return float(x >> 8) * (1.0f / 16777216.0f);
}

// Loads D consecutive elements of the positions from `first`.
template <uint32_t D>
__device__ inline void load_position(float* q, const float* q_in, uint32_t first) {
    for (uint32_t i = 0; i < D; ++i) {
        q[i] = q_in[first + i];
    }
}

//! kernel hmc_step
//! grid = (ceil_div(K, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
// As the seed: one thread per chain, private arrays of 32, A read from global
// memory in every mat-vec, scalar loops over the runtime d.
uint32_t chain = blockIdx.x * blockDim.x + threadIdx.x;
if (chain >= K[0]) {
    return;
}
uint32_t d_ = d[0];
uint32_t L_ = L[0];
float eps_ = eps[0];
float q[32];
float p[32];
float q_old[32];
float f[32];
// Widths the search sizes have (d = 16, 32) load at a compile-time width;
// the widest also takes every d above 16, which reads past this chain's row.
if (d_ > 16u) {
    load_position<32>(q, q_in, chain * d_);
} else if (d_ == 16u) {
    load_position<16>(q, q_in, chain * d_);
} else {
    for (uint32_t i = 0; i < d_; ++i) {
        q[i] = q_in[chain * d_ + i];
    }
}
for (uint32_t i = 0; i < d_; ++i) {
    q_old[i] = q[i];
}
uint32_t key = seed[0] + chain * 0x9E3779B9u;
uint32_t base = hmc_step_idx[0] * (d_ + 1u);

// Momenta: Box-Muller on consecutive counters.
for (uint32_t i = 0; i < d_; i += 2) {
    float u1 = fmaxf(hmc_uniform(key, base + i), 1e-7f);
    float u2 = hmc_uniform(key, base + i + 1u);
    float r = sqrtf(-2.0f * logf(u1));
    float s;
    float c;
    sincosf(6.28318530718f * u2, &s, &c);
    p[i] = r * c;
    p[i + 1] = r * s;
}

// f = A q and the starting energy.
float U_old = 0.0f;
float K_old = 0.0f;
for (uint32_t i = 0; i < d_; ++i) {
    float acc = 0.0f;
    for (uint32_t k = 0; k < d_; ++k) {
        acc += A[i * d_ + k] * q[k];
    }
    f[i] = acc;
}
for (uint32_t i = 0; i < d_; ++i) {
    U_old += 0.5f * q[i] * f[i];
    K_old += 0.5f * p[i] * p[i];
}

// Leapfrog: half kick, then L drift + kick (the last kick is a half kick).
for (uint32_t i = 0; i < d_; ++i) {
    p[i] -= 0.5f * eps_ * f[i];
}
for (uint32_t l = 0; l < L_; ++l) {
    for (uint32_t i = 0; i < d_; ++i) {
        q[i] += eps_ * p[i];
    }
    for (uint32_t i = 0; i < d_; ++i) {
        float acc = 0.0f;
        for (uint32_t k = 0; k < d_; ++k) {
            acc += A[i * d_ + k] * q[k];
        }
        f[i] = acc;
    }
    float step = (l == L_ - 1u) ? 0.5f * eps_ : eps_;
    for (uint32_t i = 0; i < d_; ++i) {
        p[i] -= step * f[i];
    }
}

float U_new = 0.0f;
float K_new = 0.0f;
for (uint32_t i = 0; i < d_; ++i) {
    U_new += 0.5f * q[i] * f[i];
    K_new += 0.5f * p[i] * p[i];
}
float dH = (U_new + K_new) - (U_old + K_old);

// Metropolis test.
float u_acc = hmc_uniform(key, base + d_);
bool accept = isfinite(dH) && (logf(fmaxf(u_acc, 1e-30f)) < -dH);
for (uint32_t i = 0; i < d_; ++i) {
    q_out[chain * d_ + i] = accept ? q[i] : q_old[i];
}
accept_cnt_out[chain] = accept_cnt[chain] + (accept ? 1u : 0u);
