#include <metal_stdlib>
using namespace metal;

// heat2d with signed extents: the host binds 4-byte values, so NX and NY are
// read as int (no unsigned wrap in the neighbour arithmetic), and the cell
// index comes from the full uint3 grid position. Neighbours are read through
// row pointers; interior rows use one fused multiply-add.
kernel void heat_step(device const float* u_in  [[buffer(0)]],
                      device float*       u_out [[buffer(1)]],
                      constant int&       NX    [[buffer(2)]],
                      constant int&       NY    [[buffer(3)]],
                      constant float&     alpha [[buffer(4)]],
                      uint3 pos [[thread_position_in_grid]],
                      uint3 grid [[threads_per_grid]])
{
    const int i = int(pos.x), j = int(pos.y);
    if (i >= NX || j >= NY || pos.x >= grid.x) return;
    device const float* row = u_in + j * NX;
    const float c = row[i];
    if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) {
        u_out[j * NX + i] = c;
        return;
    }
    device const float* above = row + NX;
    device const float* below = row - NX;
    const float sum4 = row[i - 1] + row[i + 1] + below[i] + above[i];
    u_out[j * NX + i] = fma(alpha, sum4 - 4.0f * c, c);
}
