#include <metal_stdlib>
using namespace metal;

// lj with a simd-cooperative force: in lj_step each simdgroup takes its 32
// particles in turn; the particle's position is broadcast, lanes 0..26 each
// scan one of its 27 neighbour cells, and simd_sum reduces the partial
// forces; the lane that owns the particle keeps the total. Neighbour cells
// are read by 27 lanes at once instead of one thread walking all of them.
// Build and clear are the seed's (relaxed atomics).

static inline int3 cell_coords(float3 r, uint M, float L) {
    const float3 w = r - L * floor(r / L);
    const int3 c = int3(floor(w / (L / float(M))));
    return clamp(c, int3(0), int3(int(M) - 1));
}

kernel void lj_clear_cells(device atomic_uint* cell_count [[buffer(0)]],
                           constant uint&      M3         [[buffer(1)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid < M3) {
        atomic_store_explicit(&cell_count[gid], 0u, memory_order_relaxed);
    }
}

kernel void lj_build_cells(device const float4* pos          [[buffer(0)]],
                           device atomic_uint*  cell_count   [[buffer(1)]],
                           device uint*         cell_list    [[buffer(2)]],
                           constant uint&       N            [[buffer(3)]],
                           constant uint&       M            [[buffer(4)]],
                           constant float&      L            [[buffer(5)]],
                           constant uint&       MAX_PER_CELL [[buffer(6)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid >= N) return;
    const int3 c = cell_coords(pos[gid].xyz, M, L);
    const uint cell = (uint(c.z) * M + uint(c.y)) * M + uint(c.x);
    const uint slot = atomic_fetch_add_explicit(&cell_count[cell], 1u, memory_order_relaxed);
    if (slot < MAX_PER_CELL) {
        cell_list[cell * MAX_PER_CELL + slot] = gid;
    }
}

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
                    uint   gid  [[thread_position_in_grid]],
                    ushort lane [[thread_index_in_simdgroup]],
                    ushort simd_width [[threads_per_simdgroup]])
{
    const float3 ri = pos_in[min(gid, N - 1)].xyz;
    const int m = int(M);
    float3 force = float3(0.0f);
    for (ushort q = 0; q < simd_width; ++q) {
        const uint pid = simd_shuffle(gid, q);
        if (pid >= N) continue;  // the same for every lane
        const float3 rq = simd_shuffle(ri, q);
        float3 part = float3(0.0f);
        if (lane < 27) {
            const int3 c = cell_coords(rq, M, L);
            const int dz = int(lane) / 9 - 1;
            const int dy = (int(lane) / 3) % 3 - 1;
            const int dx = int(lane) % 3 - 1;
            const uint cx = uint((c.x + dx + m) % m);
            const uint cy = uint((c.y + dy + m) % m);
            const uint cz = uint((c.z + dz + m) % m);
            const uint cell = (cz * M + cy) * M + cx;
            const uint n = min(cell_count[cell], MAX_PER_CELL);
            for (uint s = 0; s < n; ++s) {
                const uint j = cell_list[cell * MAX_PER_CELL + s];
                if (j == pid) continue;
                float3 d = pos_in[j].xyz - rq;
                d -= L * round(d / L);
                const float r2 = dot(d, d);
                if (r2 < rcut2 && r2 > 1e-12f) {
                    const float inv_r2 = 1.0f / r2;
                    const float inv_r6 = inv_r2 * inv_r2 * inv_r2;
                    part += (-24.0f * (2.0f * inv_r6 * inv_r6 - inv_r6) * inv_r2) * d;
                }
            }
        }
        const float3 total = simd_sum(part);
        if (lane == q) force = total;
    }
    if (gid >= N) return;
    const float3 v = vel_in[gid].xyz + force * dt;
    pos_out[gid] = float4(ri + v * dt, 0.0f);
    vel_out[gid] = float4(v, 0.0f);
}
