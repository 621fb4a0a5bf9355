#include <metal_stdlib>
using namespace metal;

// hmc: the precision matrix A (d*d <= 1024 floats) is staged once per
// threadgroup in threadgroup memory, so the L+1 mat-vecs of every chain read
// it from there instead of device memory. The chain itself is a template on
// the dimension: d = 8, 16 and 32 get fully unrolled register arrays, any
// other even d <= 32 takes the generic path (D = 0, runtime bound).
#define MAX_D 32
#define GOLDEN 0x9E3779B9u

static inline uint mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

static inline float uniform01(uint seed, uint chain, uint counter) {
    uint x = seed + chain * GOLDEN;
    x = mix32(x ^ counter);
    x = mix32(x);
    return float(x >> 8) * (1.0f / 16777216.0f);
}

template <uint D>
static inline void matvec(threadgroup const float* A, thread const float* v, thread float* out,
                          uint n) {
    const uint dim = (D == 0) ? n : D;
    for (uint r = 0; r < dim; ++r) {
        float s = 0.0f;
        for (uint c = 0; c < dim; ++c) {
            s = fma(A[r * dim + c], v[c], s);
        }
        out[r] = s;
    }
}

struct Chain {
    uint seed;
    uint id;
    uint base;   // first RNG counter of this step
    uint L;
    float eps;
};

template <uint D>
static bool hmc_chain(threadgroup const float* A, device const float* q_in, device float* q_out,
                      Chain ch, uint n) {
    const uint dim = (D == 0) ? n : D;
    constexpr uint CAP = (D == 0) ? MAX_D : D;
    float q[CAP], p[CAP], q0[CAP], f[CAP];
    for (uint i = 0; i < dim; ++i) {
        q[i] = q_in[ch.id * dim + i];
        q0[i] = q[i];
    }
    for (uint i = 0; i < dim; i += 2) {
        const float u1 = max(uniform01(ch.seed, ch.id, ch.base + i), 1e-7f);
        const float u2 = uniform01(ch.seed, ch.id, ch.base + i + 1);
        const float r = sqrt(-2.0f * log(u1));
        float cs;
        const float sn = sincos(2.0f * M_PI_F * u2, cs);
        p[i] = r * cs;
        p[i + 1] = r * sn;
    }
    matvec<D>(A, q, f, dim);
    float e0 = 0.0f;
    for (uint i = 0; i < dim; ++i) {
        e0 += 0.5f * (q[i] * f[i] + p[i] * p[i]);
    }
    const float half_eps = 0.5f * ch.eps;
    for (uint i = 0; i < dim; ++i) p[i] -= half_eps * f[i];
    for (uint l = 0; l < ch.L; ++l) {
        for (uint i = 0; i < dim; ++i) q[i] = fma(ch.eps, p[i], q[i]);
        matvec<D>(A, q, f, dim);
        const float s = (l + 1 == ch.L) ? half_eps : ch.eps;
        for (uint i = 0; i < dim; ++i) p[i] -= s * f[i];
    }
    float e1 = 0.0f;
    for (uint i = 0; i < dim; ++i) {
        e1 += 0.5f * (q[i] * f[i] + p[i] * p[i]);
    }
    const float dH = e1 - e0;
    const float u_acc = uniform01(ch.seed, ch.id, ch.base + dim);
    const bool accept = isfinite(dH) && log(max(u_acc, 1e-30f)) < -dH;
    for (uint i = 0; i < dim; ++i) {
        q_out[ch.id * dim + i] = accept ? q[i] : q0[i];
    }
    return accept;
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
                     uint chain_idx [[thread_position_in_grid]],
                     uint tid       [[thread_index_in_threadgroup]],
                     uint ntg       [[threads_per_threadgroup]])
{
    threadgroup float As[MAX_D * MAX_D];
    for (uint e = tid; e < d * d; e += ntg) {
        As[e] = A[e];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (chain_idx >= K) return;

    const Chain ch = {seed, chain_idx, hmc_step_idx * (d + 1), L, eps};
    bool accepted;
    switch (d) {
        case 8:  accepted = hmc_chain<8>(As, q_in, q_out, ch, d); break;
        case 16: accepted = hmc_chain<16>(As, q_in, q_out, ch, d); break;
        case 32: accepted = hmc_chain<32>(As, q_in, q_out, ch, d); break;
        default: accepted = hmc_chain<0>(As, q_in, q_out, ch, d); break;
    }
    accept_cnt[chain_idx] += accepted ? 1u : 0u;
}
