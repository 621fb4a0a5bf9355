#include <metal_stdlib>
#include <metal_simdgroup_matrix>
using namespace metal;

// hmc with simdgroup matrices: a simdgroup advances its 32 chains together.
// Their positions sit in threadgroup memory as a 32 x Dp tile (Dp = d
// rounded up to a multiple of 8, zero-padded) and each gradient of the 32
// chains, F = Q A (A is symmetric), is one product of 8x8
// simdgroup_float8x8 tiles against the zero-padded A staged per threadgroup.
// Each lane then reads its own row back. Lanes past K run on zeros (the
// matrix ops need the whole simdgroup) and store nothing.
#define SIMD 32
#define MAX_D 32
#define TG_THREADS 64
#define SG_PER_TG (TG_THREADS / SIMD)

static inline uint mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

static inline float rng_u01(uint seed, uint chain, uint counter) {
    uint x = seed + chain * 0x9E3779B9u;
    x = mix32(x ^ counter);
    return float(mix32(x) >> 8) * (1.0f / 16777216.0f);
}

// F (32 x dp) = Q (32 x dp) * A (dp x dp), all row-major in threadgroup
// memory: each 8-column block of A is loaded once and used by the four
// 8-row blocks of Q (four accumulators)
static void gradient_tiles(threadgroup const float* As, threadgroup const float* Q,
                           threadgroup float* F, uint dp) {
    for (uint cb = 0; cb < dp; cb += 8) {
        simdgroup_float8x8 acc[SIMD / 8];
        for (uint r = 0; r < SIMD / 8; ++r) acc[r] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        for (uint kb = 0; kb < dp; kb += 8) {
            simdgroup_float8x8 ab;
            simdgroup_load(ab, As + kb * dp + cb, dp);
            for (uint r = 0; r < SIMD / 8; ++r) {
                simdgroup_float8x8 qa;
                simdgroup_load(qa, Q + r * 8 * dp + kb, dp);
                simdgroup_multiply_accumulate(acc[r], qa, ab, acc[r]);
            }
        }
        for (uint r = 0; r < SIMD / 8; ++r) simdgroup_store(acc[r], F + r * 8 * dp + cb, dp);
    }
}

static void gradient(threadgroup const float* As, threadgroup float* Q, threadgroup float* F,
                     thread const float* q, thread float* f, uint d, uint dp, ushort lane) {
    for (uint i = 0; i < dp; ++i) Q[lane * dp + i] = (i < d) ? q[i] : 0.0f;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    gradient_tiles(As, Q, F, dp);
    simdgroup_barrier(mem_flags::mem_threadgroup);
    for (uint i = 0; i < d; ++i) f[i] = F[lane * dp + i];
}

[[max_total_threads_per_threadgroup(TG_THREADS)]]
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
                     uint   chain_idx [[thread_position_in_grid]],
                     ushort tid       [[thread_index_in_threadgroup]],
                     ushort lane      [[thread_index_in_simdgroup]],
                     ushort sg        [[simdgroup_index_in_threadgroup]],
                     ushort ntg       [[threads_per_threadgroup]])
{
    threadgroup float As[MAX_D * MAX_D];
    threadgroup float Qs[SG_PER_TG][SIMD * MAX_D];
    threadgroup float Fs[SG_PER_TG][SIMD * MAX_D];
    const uint dp = (d + 7u) & ~7u;
    for (uint e = tid; e < dp * dp; e += ntg) {
        const uint r = e / dp, c = e % dp;
        As[e] = (r < d && c < d) ? A[r * d + c] : 0.0f;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const bool valid = chain_idx < K;
    threadgroup float* Q = Qs[sg];
    threadgroup float* F = Fs[sg];
    float q[MAX_D], p[MAX_D], q0[MAX_D], f[MAX_D];
    for (uint i = 0; i < d; ++i) {
        q[i] = valid ? q_in[chain_idx * d + i] : 0.0f;
        q0[i] = q[i];
    }
    const uint base = hmc_step_idx * (d + 1);
    for (uint i = 0; i < d; i += 2) {
        const float u1 = max(rng_u01(seed, chain_idx, base + i), 1e-7f);
        const float u2 = rng_u01(seed, chain_idx, base + i + 1);
        const float r = sqrt(-2.0f * log(u1));
        const float th = 2.0f * M_PI_F * u2;
        p[i] = r * cos(th);
        p[i + 1] = r * sin(th);
    }
    gradient(As, Q, F, q, f, d, dp, lane);
    float h0 = 0.0f;
    for (uint i = 0; i < d; ++i) h0 += 0.5f * q[i] * f[i] + 0.5f * p[i] * p[i];
    for (uint i = 0; i < d; ++i) p[i] -= 0.5f * eps * f[i];
    for (uint l = 0; l < L; ++l) {
        for (uint i = 0; i < d; ++i) q[i] += eps * p[i];
        gradient(As, Q, F, q, f, d, dp, lane);
        const float s = (l == L - 1) ? 0.5f * eps : eps;
        for (uint i = 0; i < d; ++i) p[i] -= s * f[i];
    }
    float h1 = 0.0f;
    for (uint i = 0; i < d; ++i) h1 += 0.5f * q[i] * f[i] + 0.5f * p[i] * p[i];
    const float dH = h1 - h0;
    const float u_acc = rng_u01(seed, chain_idx, base + d);
    const bool accept = isfinite(dH) && log(max(u_acc, 1e-30f)) < -dH;
    if (!valid) return;
    for (uint i = 0; i < d; ++i) q_out[chain_idx * d + i] = accept ? q[i] : q0[i];
    if (accept) accept_cnt[chain_idx]++;
}
