// mlxsci simulator: what this header offers kernels comes from cuda_prelude.h and utils.cuh.
#pragma once
#include "mlx/backend/cuda/device/utils.cuh"
