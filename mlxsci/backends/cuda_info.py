"""What an NVIDIA GPU is, read from the driver: SM count, clocks, caches.

MLX's `mx.device_info` names the device but does not give the SM count or the
clock, which the roofline needs to state the theoretical FP32 rate (SMs x FP32
lanes per SM x 2 FLOPs per FMA x clock) beside the one it measures. These come
from the CUDA driver API (`libcuda.so.1`, present wherever MLX's CUDA build
runs) through ctypes, so no extra package is needed.
"""

from __future__ import annotations

import ctypes

# CUdevice_attribute values (cuda.h; stable across CUDA versions).
_ATTRIBUTES = {
    "clock_khz": 13,  # CU_DEVICE_ATTRIBUTE_CLOCK_RATE (peak SM clock)
    "sm_count": 16,  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    "memory_clock_khz": 36,  # CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE
    "memory_bus_bits": 37,  # CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH
    "l2_bytes": 38,  # CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
    "cc_major": 75,  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    "cc_minor": 76,  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
}


def fp32_lanes_per_sm(cc_major: int, cc_minor: int) -> int:
    """FP32 FMA units per SM (CUDA C Programming Guide, arithmetic throughput
    table): 64 on Volta, Turing and A100 (7.x, 8.0), 128 from GA10x on (8.6+,
    Hopper 9.0, Blackwell 10.x/12.x)."""
    if cc_major < 8 or (cc_major, cc_minor) == (8, 0):
        return 64
    return 128


def theoretical(props: dict) -> dict:
    """Theoretical FP32 GFLOPS and DRAM GB/s from the driver's attributes."""
    lanes = fp32_lanes_per_sm(props["cc_major"], props["cc_minor"])
    gflops = props["sm_count"] * lanes * 2 * props["clock_khz"] * 1e3 / 1e9
    # Double data rate: two transfers per memory clock on each bus bit.
    dram = 2 * props["memory_clock_khz"] * 1e3 * props["memory_bus_bits"] / 8 / 1e9
    return {"fp32_gflops": gflops, "dram_gbps": dram, "fp32_lanes_per_sm": lanes}


def device_properties(ordinal: int = 0, lib=None) -> dict | None:
    """The attributes above for CUDA device `ordinal`, or None when there is no
    driver (e.g. on a Mac or the simulator's machine). `lib` is for tests."""
    try:
        cuda = lib or ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    device = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
        return None
    props = {}
    for key, attribute in _ATTRIBUTES.items():
        value = ctypes.c_int()
        if cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, device) != 0:
            return None
        props[key] = value.value
    props.update(theoretical(props))
    return props
