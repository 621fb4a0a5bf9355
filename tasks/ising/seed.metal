//! header
// Murmur3 finaliser used by the counter-based RNG.
inline uint ising_mix32(uint x) {
    x ^= x >> 16;
    x *= 0x85EBCA6Bu;
    x ^= x >> 13;
    x *= 0xC2B2AE35u;
    x ^= x >> 16;
    return x;
}

//! kernel ising_step
//! grid = (ceil_div(NX, 16) * 16, ceil_div(NY, 16) * 16, 1)
//! threadgroup = (16, 16, 1)
// Naive seed: one thread per site. Inactive-colour threads copy their spin
// (MLX outputs are fresh arrays); active ones do 5 byte loads with explicit
// periodic index selects, a table lookup, the hash and a conditional flip.
uint i = thread_position_in_grid.x;
uint j = thread_position_in_grid.y;
if (i >= NX || j >= NY) {
    return;
}
uint idx = j * NX + i;
int s = spins[idx];
if (((i + j) & 1u) != (step_idx & 1u)) {
    spins_out[idx] = spins[idx];
    return;
}
uint im = (i == 0) ? NX - 1 : i - 1;
uint ip = (i == NX - 1) ? 0 : i + 1;
uint jm = (j == 0) ? NY - 1 : j - 1;
uint jp = (j == NY - 1) ? 0 : j + 1;
int h = spins[j * NX + im] + spins[j * NX + ip] + spins[jm * NX + i] + spins[jp * NX + i];
float pa = p_accept[(s * h + 4) / 2];
uint x = seed + step_idx * 0x9E3779B9u;
x = ising_mix32(x);
x = ising_mix32(x ^ idx);
float u = float(x >> 8) * (1.0f / 16777216.0f);
spins_out[idx] = (u < pa) ? (char)(-s) : (char)s;
