#include <metal_stdlib>
using namespace metal;

// adi3d without threadgroup memory or barriers: each thread solves its line
// with c' and d' in private arrays (c' recomputed on the fly in the forward
// sweep), and one template on the axis builds the three kernels' line
// geometry at compile time. Face lines are copied.
#define MAX_AXIS 256

struct Grid3 {
    uint nx, ny, nz;
};

template <int AXIS>
struct LineOf {
    // (first element, stride, length) of the line through off-axis (p, q)
    static inline uint3 get(Grid3 g, uint p, uint q) {
        if (AXIS == 0) return uint3((q * g.ny + p) * g.nx, 1u, g.nx);
        if (AXIS == 1) return uint3(q * g.ny * g.nx + p, g.nx, g.ny);
        return uint3(q * g.nx + p, g.nx * g.ny, g.nz);
    }
    static inline bool on_face(Grid3 g, uint p, uint q) {
        const uint np = (AXIS == 0) ? g.ny : g.nx;
        const uint nq = (AXIS == 2) ? g.ny : g.nz;
        return p == 0 || q == 0 || p == np - 1 || q == nq - 1;
    }
    static inline bool outside(Grid3 g, uint p, uint q) {
        const uint np = (AXIS == 0) ? g.ny : g.nx;
        const uint nq = (AXIS == 2) ? g.ny : g.nz;
        return p >= np || q >= nq;
    }
};

template <int AXIS>
static inline void adi_line(device const float* u_in, device float* u_out, Grid3 g, uint2 pq,
                            float mu) {
    if (LineOf<AXIS>::outside(g, pq.x, pq.y)) return;
    const uint3 ln = LineOf<AXIS>::get(g, pq.x, pq.y);
    const uint base = ln.x, stride = ln.y, n = ln.z;
    if (LineOf<AXIS>::on_face(g, pq.x, pq.y)) {
        for (uint i = 0; i < n; ++i) u_out[base + i * stride] = u_in[base + i * stride];
        return;
    }
    const float a = -mu, b = 1.0f + 2.0f * mu, c = -mu;
    float cp[MAX_AXIS], dp[MAX_AXIS];
    const float r0 = u_in[base], rn = u_in[base + (n - 1) * stride];
    for (uint i = 1; i + 1 < n; ++i) {
        float r = u_in[base + i * stride];
        if (i == 1) r += mu * r0;
        if (i == n - 2) r += mu * rn;
        const float den = (i == 1) ? b : b - a * cp[i - 1];
        cp[i] = c / den;
        dp[i] = (i == 1) ? r / den : (r - a * dp[i - 1]) / den;
    }
    u_out[base] = r0;
    u_out[base + (n - 1) * stride] = rn;
    float x = dp[n - 2];
    u_out[base + (n - 2) * stride] = x;
    for (int i = int(n) - 3; i >= 1; --i) {
        x = dp[i] - cp[i] * x;
        u_out[base + uint(i) * stride] = x;
    }
}

kernel void adi_x(device const float* u_in [[buffer(0)]], device float* u_out [[buffer(1)]],
                  constant uint& NX [[buffer(2)]], constant uint& NY [[buffer(3)]],
                  constant uint& NZ [[buffer(4)]], constant float& mu [[buffer(5)]],
                  uint2 gid [[thread_position_in_grid]])
{
    adi_line<0>(u_in, u_out, Grid3{NX, NY, NZ}, gid, mu);
}

kernel void adi_y(device const float* u_in [[buffer(0)]], device float* u_out [[buffer(1)]],
                  constant uint& NX [[buffer(2)]], constant uint& NY [[buffer(3)]],
                  constant uint& NZ [[buffer(4)]], constant float& mu [[buffer(5)]],
                  uint2 gid [[thread_position_in_grid]])
{
    adi_line<1>(u_in, u_out, Grid3{NX, NY, NZ}, gid, mu);
}

kernel void adi_z(device const float* u_in [[buffer(0)]], device float* u_out [[buffer(1)]],
                  constant uint& NX [[buffer(2)]], constant uint& NY [[buffer(3)]],
                  constant uint& NZ [[buffer(4)]], constant float& mu [[buffer(5)]],
                  uint2 gid [[thread_position_in_grid]])
{
    adi_line<2>(u_in, u_out, Grid3{NX, NY, NZ}, gid, mu);
}
