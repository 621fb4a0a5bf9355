#include <metal_stdlib>
using namespace metal;

// wave3d, 2.5‑D blocking within the host's one-thread-per-cell launch: every
// z-slice of the (8, 8, 4) threadgroup stages its XY plane (with a one-cell
// halo in x and y) in threadgroup memory, while the z-neighbours are kept in
// registers (a three-value z window loaded straight from memory).
#define BX 8
#define BY 8
#define BZ 4
#define PLANE_W (BX + 2)
#define PLANE_H (BY + 2)

constant constexpr uint kThreads = BX * BY * BZ;  // 256: the host's 8×8×4

static inline uint lin(uint i, uint j, uint k, uint nx, uint ny) {
    return (k * ny + j) * nx + i;
}

[[max_total_threads_per_threadgroup(kThreads)]]
kernel void wave_step(device const float* u_prev [[buffer(0)]],
                      device const float* u_curr [[buffer(1)]],
                      device float*       u_next [[buffer(2)]],
                      constant uint&      NX     [[buffer(3)]],
                      constant uint&      NY     [[buffer(4)]],
                      constant uint&      NZ     [[buffer(5)]],
                      constant float&     alpha  [[buffer(6)]],
                      uint3   gid [[thread_position_in_grid]],
                      ushort3 lid [[thread_position_in_threadgroup]],
                      ushort3 tgs [[threads_per_threadgroup]])
{
    threadgroup float plane[BZ][PLANE_H][PLANE_W];
    // clamped coordinates: threads past the domain still help to fill the tile
    const uint i = min(gid.x, NX - 1), j = min(gid.y, NY - 1), k = min(gid.z, NZ - 1);
    const uint idx = lin(i, j, k, NX, NY);
    const ushort x = lid.x + 1, y = lid.y + 1, z = lid.z;
    const float c = u_curr[idx];
    plane[z][y][x] = c;
    if (lid.x == 0)         plane[z][y][0]     = u_curr[lin(i > 0 ? i - 1 : 0, j, k, NX, NY)];
    if (lid.x == tgs.x - 1) plane[z][y][x + 1] = u_curr[lin(min(i + 1, NX - 1), j, k, NX, NY)];
    if (lid.y == 0)         plane[z][0][x]     = u_curr[lin(i, j > 0 ? j - 1 : 0, k, NX, NY)];
    if (lid.y == tgs.y - 1) plane[z][y + 1][x] = u_curr[lin(i, min(j + 1, NY - 1), k, NX, NY)];
    // the register z window
    const float below = u_curr[lin(i, j, k > 0 ? k - 1 : 0, NX, NY)];
    const float above = u_curr[lin(i, j, min(k + 1, NZ - 1), NX, NY)];
    threadgroup_barrier(mem_flags::mem_threadgroup);

    if (gid.x >= NX || gid.y >= NY || gid.z >= NZ) return;
    if (i == 0 || j == 0 || k == 0 || i == NX - 1 || j == NY - 1 || k == NZ - 1) {
        u_next[idx] = c;
        return;
    }
    const float lap = plane[z][y][x - 1] + plane[z][y][x + 1]
                    + plane[z][y - 1][x] + plane[z][y + 1][x]
                    + below + above - 6.0f * c;
    u_next[idx] = fma(alpha, lap, 2.0f * c - u_prev[idx]);
}
