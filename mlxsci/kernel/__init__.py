"""The kernel format: candidate files, dialects, generated signatures, launch expressions and limits, and the source policy (kernel/source/)."""
