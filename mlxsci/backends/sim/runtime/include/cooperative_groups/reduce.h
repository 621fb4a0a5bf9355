// mlxsci simulator: cg::reduce lives in <cooperative_groups.h> here.
#ifndef MLXSCI_STUB_COOPERATIVE_GROUPS_REDUCE_H
#define MLXSCI_STUB_COOPERATIVE_GROUPS_REDUCE_H
#include <cooperative_groups.h>
#endif
