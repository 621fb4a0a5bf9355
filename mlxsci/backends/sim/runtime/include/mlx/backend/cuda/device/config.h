// mlxsci simulator: the constants of MLX's CUDA device config.h.
#pragma once

#define MAX_NDIM 10
#define WARP_SIZE 32
