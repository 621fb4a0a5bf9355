//! header
// Transfer fixture (grade B through a fault): the hmc seed, except that it
// loads a chain's position at a width fixed at compile time, instantiated for
// the in-distribution dimensions. At d = 24 (the held-out) it takes the
// 32-wide load, so the last chain reads 8 elements past the end of q_in: the
// simulator names the out-of-bounds read; an Apple GPU read them silently.

// Murmur3 finaliser and the hmc counter-based uniform (24 bits, exact in fp32).
inline uint hmc_mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

inline float hmc_uniform(uint key, uint counter) {
    uint x = hmc_mix32(key ^ counter);
    x = hmc_mix32(x);
    return float(x >> 8) * (1.0f / 16777216.0f);
}

// Loads D consecutive elements of the positions from `first`.
template <uint D>
inline void load_position(thread float* q, const device float* q_in, uint first) {
    for (uint i = 0; i < D; ++i) {
        q[i] = q_in[first + i];
    }
}

//! kernel hmc_step
//! grid = (ceil_div(K, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
// As the seed: one thread per chain, private arrays of 32, A read from device
// memory in every mat-vec, scalar loops over the runtime d.
uint chain = thread_position_in_grid.x;
if (chain >= K) {
    return;
}
float q[32];
float p[32];
float q_old[32];
float f[32];
// Widths the search sizes have (d = 16, 32) load at a compile-time width;
// the widest also takes every d above 16, which reads past this chain's row.
if (d > 16u) {
    load_position<32>(q, q_in, chain * d);
} else if (d == 16u) {
    load_position<16>(q, q_in, chain * d);
} else {
    for (uint i = 0; i < d; ++i) {
        q[i] = q_in[chain * d + i];
    }
}
for (uint i = 0; i < d; ++i) {
    q_old[i] = q[i];
}
uint key = seed + chain * 0x9E3779B9u;
uint base = hmc_step_idx * (d + 1u);

// Momenta: Box-Muller on consecutive counters.
for (uint i = 0; i < d; i += 2) {
    float u1 = max(hmc_uniform(key, base + i), 1e-7f);
    float u2 = hmc_uniform(key, base + i + 1u);
    float r = sqrt(-2.0f * log(u1));
    float c;
    float s = sincos(6.28318530718f * u2, c);
    p[i] = r * c;
    p[i + 1] = r * s;
}

// f = A q and the starting energy.
float U_old = 0.0f;
float K_old = 0.0f;
for (uint i = 0; i < d; ++i) {
    float acc = 0.0f;
    for (uint k = 0; k < d; ++k) {
        acc += A[i * d + k] * q[k];
    }
    f[i] = acc;
}
for (uint i = 0; i < d; ++i) {
    U_old += 0.5f * q[i] * f[i];
    K_old += 0.5f * p[i] * p[i];
}

// Leapfrog: half kick, then L drift + kick (the last kick is a half kick).
for (uint i = 0; i < d; ++i) {
    p[i] -= 0.5f * eps * f[i];
}
for (uint l = 0; l < L; ++l) {
    for (uint i = 0; i < d; ++i) {
        q[i] += eps * p[i];
    }
    for (uint i = 0; i < d; ++i) {
        float acc = 0.0f;
        for (uint k = 0; k < d; ++k) {
            acc += A[i * d + k] * q[k];
        }
        f[i] = acc;
    }
    float step = (l == L - 1u) ? 0.5f * eps : eps;
    for (uint i = 0; i < d; ++i) {
        p[i] -= step * f[i];
    }
}

float U_new = 0.0f;
float K_new = 0.0f;
for (uint i = 0; i < d; ++i) {
    U_new += 0.5f * q[i] * f[i];
    K_new += 0.5f * p[i] * p[i];
}
float dH = (U_new + K_new) - (U_old + K_old);

// Metropolis test.
float u_acc = hmc_uniform(key, base + d);
bool accept = isfinite(dH) && (log(max(u_acc, 1e-30f)) < -dH);
for (uint i = 0; i < d; ++i) {
    q_out[chain * d + i] = accept ? q[i] : q_old[i];
}
accept_cnt_out[chain] = accept_cnt[chain] + (accept ? 1u : 0u);
