// mlxsci simulator: provided by cuda_prelude.h, included first.
