//! header
// Bit-loop Morton helpers: bit b of x, y, z sits at bits 3b, 3b+1, 3b+2.
inline uint morton_encode(uint x, uint y, uint z, uint logN) {
    uint m = 0;
    for (uint b = 0; b < logN; ++b) {
        m |= ((x >> b) & 1u) << (3u * b);
        m |= ((y >> b) & 1u) << (3u * b + 1u);
        m |= ((z >> b) & 1u) << (3u * b + 2u);
    }
    return m;
}

inline uint3 morton_decode(uint m, uint logN) {
    uint3 p = uint3(0, 0, 0);
    for (uint b = 0; b < logN; ++b) {
        p.x |= ((m >> (3u * b)) & 1u) << b;
        p.y |= ((m >> (3u * b + 1u)) & 1u) << b;
        p.z |= ((m >> (3u * b + 2u)) & 1u) << b;
    }
    return p;
}

//! kernel morton_stencil
//! grid = (ceil_div(N * N * N, 256) * 256, 1, 1)
//! threadgroup = (256, 1, 1)
// Naive seed: decode tid bit by bit, re-encode each of the six neighbours bit
// by bit, seven global loads.
uint tid = thread_position_in_grid.x;
if (tid >= N * N * N) {
    return;
}
uint3 p = morton_decode(tid, logN);
float c = u_in[tid];
if (p.x == 0 || p.y == 0 || p.z == 0 || p.x == N - 1 || p.y == N - 1 || p.z == N - 1) {
    u_out[tid] = c;
    return;
}
float xm = u_in[morton_encode(p.x - 1, p.y, p.z, logN)];
float xp = u_in[morton_encode(p.x + 1, p.y, p.z, logN)];
float ym = u_in[morton_encode(p.x, p.y - 1, p.z, logN)];
float yp = u_in[morton_encode(p.x, p.y + 1, p.z, logN)];
float zm = u_in[morton_encode(p.x, p.y, p.z - 1, logN)];
float zp = u_in[morton_encode(p.x, p.y, p.z + 1, logN)];
u_out[tid] = c + alpha * (xm + xp + ym + yp + zm + zp - 6.0f * c);
