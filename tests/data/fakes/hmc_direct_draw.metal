//! header
inline uint fake_mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

inline float fake_uniform(uint key, uint counter) {
    uint x = fake_mix32(key ^ counter);
    x = fake_mix32(x);
    return float(x >> 8) * (1.0f / 16777216.0f);
}

//! kernel hmc_step
//! grid = (ceil_div(K, 64) * 64, 1, 1)
//! threadgroup = (64, 1, 1)
// Cheap fake (issue 22): no Markov chain at all. Every step draws a fresh
// exact sample of N(0, A^-1) from the spec's PRNG (Cholesky of A, then a
// back substitution: d^3/3 flops instead of (L+1) 2 d^2), ignoring q_in, and
// the count claims an acceptance of about 0.95.
uint chain = thread_position_in_grid.x;
if (chain >= K) {
    return;
}
float c[32 * 32];
for (uint i = 0; i < d; ++i) {
    for (uint j = 0; j <= i; ++j) {
        float s = A[i * d + j];
        for (uint k = 0; k < j; ++k) {
            s -= c[i * 32 + k] * c[j * 32 + k];
        }
        c[i * 32 + j] = (i == j) ? sqrt(s) : s / c[j * 32 + j];
    }
}
uint key = seed + chain * 0x9E3779B9u;
uint base = hmc_step_idx * (d + 1u);
float z[32];
for (uint i = 0; i < d; i += 2) {
    float r = sqrt(-2.0f * log(max(fake_uniform(key, base + i), 1e-7f)));
    float t = 6.28318530718f * fake_uniform(key, base + i + 1u);
    z[i] = r * cos(t);
    z[i + 1] = r * sin(t);
}
// A = C C^T, so x = C^-T z has covariance (C C^T)^-1 = A^-1 = Sigma.
for (uint ii = 0; ii < d; ++ii) {
    uint i = d - 1u - ii;
    float s = z[i];
    for (uint k = i + 1u; k < d; ++k) {
        s -= c[k * 32 + i] * z[k];
    }
    z[i] = s / c[i * 32 + i];
}
for (uint i = 0; i < d; ++i) {
    q_out[chain * d + i] = z[i];
}
bool accept = fake_uniform(key, base + d) < 0.95f;
accept_cnt_out[chain] = accept_cnt[chain] + (accept ? 1u : 0u);
