"""State on disk that outlives a process: the cache, locks, safe names, and the faults of the machine (no space, missing toolchain)."""
