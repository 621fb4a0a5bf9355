#include <metal_stdlib>
using namespace metal;

// lj with a program-scope table of the 27 neighbour offsets, the box in a
// small struct (1/L precomputed for the minimum image), each cell's slots
// read through a row pointer, and pipelines capped at the host's 128-wide
// threadgroups. Three kernels, as the host dispatches them.
constant int3 kNeighbour[27] = {
    int3(-1, -1, -1), int3(0, -1, -1), int3(1, -1, -1), int3(-1, 0, -1), int3(0, 0, -1),
    int3(1, 0, -1),   int3(-1, 1, -1), int3(0, 1, -1),  int3(1, 1, -1),  int3(-1, -1, 0),
    int3(0, -1, 0),   int3(1, -1, 0),  int3(-1, 0, 0),  int3(0, 0, 0),   int3(1, 0, 0),
    int3(-1, 1, 0),   int3(0, 1, 0),   int3(1, 1, 0),   int3(-1, -1, 1), int3(0, -1, 1),
    int3(1, -1, 1),   int3(-1, 0, 1),  int3(0, 0, 1),   int3(1, 0, 1),   int3(-1, 1, 1),
    int3(0, 1, 1),    int3(1, 1, 1)};

struct Box {
    float L;
    float invL;
    int M;
};

static inline int3 cell_of(Box b, float3 r) {
    const float3 w = r - b.L * floor(r * b.invL);
    return clamp(int3(floor(w * (float(b.M) * b.invL))), int3(0), int3(b.M - 1));
}

static inline uint cell_index(Box b, int3 c) {
    return (uint(c.z) * uint(b.M) + uint(c.y)) * uint(b.M) + uint(c.x);
}

[[kernel]] void lj_clear_cells(device metal::atomic_uint* cell_count [[buffer(0)]],
                               constant uint& M3 [[buffer(1)]],
                               uint tid [[thread_position_in_grid]])
{
    if (tid >= M3) return;
    atomic_store_explicit(&cell_count[tid], 0u, memory_order_relaxed);
}

[[max_total_threads_per_threadgroup(128)]]
kernel void lj_build_cells(device const float4* pos          [[buffer(0)]],
                           device atomic_uint*  cell_count   [[buffer(1)]],
                           device uint*         cell_list    [[buffer(2)]],
                           constant uint&       N            [[buffer(3)]],
                           constant uint&       M            [[buffer(4)]],
                           constant float&      L            [[buffer(5)]],
                           constant uint&       MAX_PER_CELL [[buffer(6)]],
                           uint tid [[thread_position_in_grid]])
{
    if (tid >= N) return;
    const Box b = {L, 1.0f / L, int(M)};
    const uint cell = cell_index(b, cell_of(b, pos[tid].xyz));
    const uint slot = atomic_fetch_add_explicit(&cell_count[cell], 1u, memory_order_relaxed);
    if (slot < MAX_PER_CELL) cell_list[cell * MAX_PER_CELL + slot] = tid;
}

[[max_total_threads_per_threadgroup(128)]]
kernel void lj_step(device const float4* pos_in       [[buffer(0)]],
                    device float4*       pos_out      [[buffer(1)]],
                    device const float4* vel_in       [[buffer(2)]],
                    device float4*       vel_out      [[buffer(3)]],
                    device const uint*   cell_count   [[buffer(4)]],
                    device const uint*   cell_list    [[buffer(5)]],
                    constant uint&       N            [[buffer(6)]],
                    constant uint&       M            [[buffer(7)]],
                    constant float&      L            [[buffer(8)]],
                    constant float&      rcut2        [[buffer(9)]],
                    constant float&      dt           [[buffer(10)]],
                    constant uint&       MAX_PER_CELL [[buffer(11)]],
                    uint tid [[thread_position_in_grid]])
{
    if (tid >= N) return;
    const Box b = {L, 1.0f / L, int(M)};
    const float4 pi = pos_in[tid];
    const int3 c = cell_of(b, pi.xyz);
    float3 f = 0.0f;
    for (uint n = 0; n < 27; ++n) {
        const int3 cc = (c + kNeighbour[n] + b.M) % b.M;
        const uint cell = cell_index(b, cc);
        const uint cnt = min(cell_count[cell], MAX_PER_CELL);
        device const uint* slots = cell_list + cell * MAX_PER_CELL;
        for (uint s = 0; s < cnt; ++s) {
            const uint j = slots[s];
            if (j == tid) continue;
            float3 d = pos_in[j].xyz - pi.xyz;
            d -= b.L * round(d * b.invL);
            const float r2 = dot(d, d);
            if (r2 >= rcut2 || r2 <= 1e-12f) continue;
            const float ir2 = 1.0f / r2;
            const float ir6 = ir2 * ir2 * ir2;
            f += (-24.0f * ir2 * ir6 * (2.0f * ir6 - 1.0f)) * d;
        }
    }
    const float3 v = vel_in[tid].xyz + f * dt;
    pos_out[tid] = float4(pi.xyz + v * dt, 0.0f);
    vel_out[tid] = float4(v, 0.0f);
}
