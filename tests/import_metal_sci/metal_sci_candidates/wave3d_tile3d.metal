#include <metal_stdlib>
using namespace metal;

// wave3d with a 3-D threadgroup tile: the (8, 8, 4) block of u_curr plus a
// one-cell halo on every side (10 x 10 x 6 floats = 2.4 KB) is loaded
// cooperatively with a strided loop over the flattened tile, one barrier,
// then each cell reads its six neighbours from threadgroup memory. The
// pipeline cap uses GNU's attribute spelling, which Metal's compiler takes
// after the parameter list.
#define TX 8
#define TY 8
#define TZ 4

constant constexpr int HX = TX + 2;
constant constexpr int HY = TY + 2;
constant constexpr int HZ = TZ + 2;

kernel void wave_step(device const float* u_prev [[buffer(0)]],
                      device const float* u_curr [[buffer(1)]],
                      device float*       u_next [[buffer(2)]],
                      constant uint&      NX     [[buffer(3)]],
                      constant uint&      NY     [[buffer(4)]],
                      constant uint&      NZ     [[buffer(5)]],
                      constant float&     alpha  [[buffer(6)]],
                      uint3  gid   [[thread_position_in_grid]],
                      uint3  tgpos [[threadgroup_position_in_grid]],
                      ushort tidx  [[thread_index_in_threadgroup]],
                      uint3  lid   [[thread_position_in_threadgroup]],
                      uint3  tpg   [[threads_per_threadgroup]])
    __attribute__((max_total_threads_per_threadgroup(256)))
{
    threadgroup float tile[HZ][HY][HX];
    const int ox = int(tgpos.x * tpg.x) - 1;
    const int oy = int(tgpos.y * tpg.y) - 1;
    const int oz = int(tgpos.z * tpg.z) - 1;
    const int wx = int(tpg.x) + 2, wy = int(tpg.y) + 2, wz = int(tpg.z) + 2;
    const int total = wx * wy * wz;
    const int nthreads = int(tpg.x * tpg.y * tpg.z);
    for (int n = int(tidx); n < total; n += nthreads) {
        const int tz = n / (wx * wy);
        const int rem = n - tz * wx * wy;
        const int ty = rem / wx;
        const int tx = rem - ty * wx;
        const int gx = clamp(ox + tx, 0, int(NX) - 1);
        const int gy = clamp(oy + ty, 0, int(NY) - 1);
        const int gz = clamp(oz + tz, 0, int(NZ) - 1);
        tile[tz][ty][tx] = u_curr[(uint(gz) * NY + uint(gy)) * NX + uint(gx)];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    const uint i = gid.x, j = gid.y, k = gid.z;
    if (i >= NX || j >= NY || k >= NZ) return;
    const uint idx = (k * NY + j) * NX + i;
    const int x = int(lid.x) + 1, y = int(lid.y) + 1, z = int(lid.z) + 1;
    const float c = tile[z][y][x];
    if (i == 0 || j == 0 || k == 0 || i == NX - 1 || j == NY - 1 || k == NZ - 1) {
        u_next[idx] = c;
        return;
    }
    const float lap = tile[z][y][x - 1] + tile[z][y][x + 1]
                    + tile[z][y - 1][x] + tile[z][y + 1][x]
                    + tile[z - 1][y][x] + tile[z + 1][y][x]
                    - 6.0f * c;
    u_next[idx] = 2.0f * c - u_prev[idx] + alpha * lap;
}
