#include <metal_stdlib>
using namespace metal;

// hmc seed: one thread per chain. Thread-private arrays of 32 floats, A read
// from device memory in every mat-vec, Box-Muller momenta from the
// counter-based RNG, L leapfrog steps, Metropolis test; accept_cnt
// accumulates over all dispatches in place.

static inline uint mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

static inline float rng_uniform(uint seed, uint chain, uint counter) {
    uint x = seed + chain * 0x9E3779B9u;
    x = mix32(x ^ counter);
    x = mix32(x);
    return float(x >> 8) * (1.0f / 16777216.0f);
}

static inline void matvec(device const float* A, thread const float* v, thread float* out, uint d) {
    for (uint r = 0; r < d; ++r) {
        float s = 0.0f;
        for (uint c = 0; c < d; ++c) {
            s += A[r * d + c] * v[c];
        }
        out[r] = s;
    }
}

kernel void hmc_step(device const float* q_in         [[buffer(0)]],
                     device float*       q_out        [[buffer(1)]],
                     device uint*        accept_cnt   [[buffer(2)]],
                     device const float* A            [[buffer(3)]],
                     constant uint&      K            [[buffer(4)]],
                     constant uint&      d            [[buffer(5)]],
                     constant uint&      L            [[buffer(6)]],
                     constant float&     eps          [[buffer(7)]],
                     constant uint&      hmc_step_idx [[buffer(8)]],
                     constant uint&      seed         [[buffer(9)]],
                     uint chain_idx [[thread_position_in_grid]])
{
    if (chain_idx >= K) return;
    float q[32], p[32], q_old[32], f[32];
    for (uint i = 0; i < d; ++i) {
        q[i] = q_in[chain_idx * d + i];
        q_old[i] = q[i];
    }
    uint base = hmc_step_idx * (d + 1);
    for (uint i = 0; i < d; i += 2) {
        float u1 = max(rng_uniform(seed, chain_idx, base + i), 1e-7f);
        float u2 = rng_uniform(seed, chain_idx, base + i + 1);
        float r = sqrt(-2.0f * log(u1));
        float cs;
        float sn = sincos(2.0f * M_PI_F * u2, cs);
        p[i] = r * cs;
        p[i + 1] = r * sn;
    }
    matvec(A, q, f, d);
    float U0 = 0.0f, K0 = 0.0f;
    for (uint i = 0; i < d; ++i) {
        U0 += 0.5f * q[i] * f[i];
        K0 += 0.5f * p[i] * p[i];
    }
    for (uint i = 0; i < d; ++i) p[i] -= 0.5f * eps * f[i];
    for (uint l = 0; l < L; ++l) {
        for (uint i = 0; i < d; ++i) q[i] += eps * p[i];
        matvec(A, q, f, d);
        float s = (l == L - 1) ? 0.5f * eps : eps;
        for (uint i = 0; i < d; ++i) p[i] -= s * f[i];
    }
    float U1 = 0.0f, K1 = 0.0f;
    for (uint i = 0; i < d; ++i) {
        U1 += 0.5f * q[i] * f[i];
        K1 += 0.5f * p[i] * p[i];
    }
    float dH = (U1 + K1) - (U0 + K0);
    float u_acc = rng_uniform(seed, chain_idx, base + d);
    bool accept = isfinite(dH) && log(max(u_acc, 1e-30f)) < -dH;
    for (uint i = 0; i < d; ++i) {
        q_out[chain_idx * d + i] = accept ? q[i] : q_old[i];
    }
    if (accept) {
        accept_cnt[chain_idx] += 1;
    }
}
