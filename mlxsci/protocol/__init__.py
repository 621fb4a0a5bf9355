"""What crosses between a worker and its parent: files and messages, bounded and scrubbed, and the outputs' digests both sides agree on."""
