"""The counter-based PRNG Metal-Sci's ising and hmc draw on the device
(spec section 0.5): the Murmur3 finaliser and a 24-bit uniform. Shared by
the two references; the kernels carry their own copy."""

import numpy as np


def mix32(x):
    """Murmur3 fmix32 on uint32 arrays (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint32)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint32(16))
        x = x * np.uint32(0x85EBCA6B)
        x = x ^ (x >> np.uint32(13))
        x = x * np.uint32(0xC2B2AE35)
        x = x ^ (x >> np.uint32(16))
    return x


def uniform(bits):
    """24-bit uniform in [0, 1), exact in fp32."""
    return (np.asarray(bits, dtype=np.uint32) >> np.uint32(8)).astype(np.float32) * np.float32(
        2.0**-24
    )
