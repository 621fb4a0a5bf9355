"""What crosses between a worker and its parent: files and messages, bounded
and scrubbed, and the outputs' digests both sides agree on.

What other layers use, importable from here: the worker's answer read as
hostile input (`read_result`, `read_worker_file`, `copy_outputs`,
`death_reason`, `cut_texts`, `schedule_file`, `OUTPUT_FILES`,
`MAX_SCHEDULES`: exchange.py) into its types (`SizeRun`, `ComparedRuns`,
`WorkerError`: results.py), outputs compared and digested alike on both
sides (`input_checksums`, `outputs_digest`, `same_bits`, `unwritten_count`,
`to_numpy`, `SENTINEL_A`, `SENTINEL_B`: outputs.py), and a process's output
read within bounds (`Drain`, `read_head_and_tail`: bounded.py).
"""

from mlxsci.protocol.bounded import Drain, read_head_and_tail
from mlxsci.protocol.exchange import (
    MAX_SCHEDULES,
    OUTPUT_FILES,
    copy_outputs,
    cut_texts,
    death_reason,
    read_result,
    read_worker_file,
    schedule_file,
)
from mlxsci.protocol.outputs import (
    SENTINEL_A,
    SENTINEL_B,
    input_checksums,
    outputs_digest,
    same_bits,
    to_numpy,
    unwritten_count,
)
from mlxsci.protocol.results import ComparedRuns, SizeRun, WorkerError

__all__ = [
    "MAX_SCHEDULES",
    "OUTPUT_FILES",
    "SENTINEL_A",
    "SENTINEL_B",
    "ComparedRuns",
    "Drain",
    "SizeRun",
    "WorkerError",
    "copy_outputs",
    "cut_texts",
    "death_reason",
    "input_checksums",
    "outputs_digest",
    "read_head_and_tail",
    "read_result",
    "read_worker_file",
    "same_bits",
    "schedule_file",
    "to_numpy",
    "unwritten_count",
]
