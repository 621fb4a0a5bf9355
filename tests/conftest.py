import os
import tempfile

# Hermetic caches for the test session: references, roofline and simulator
# builds go to a fresh directory (zig's own compiler cache stays shared).
os.environ.setdefault("MLXSCI_CACHE_DIR", tempfile.mkdtemp(prefix="mlxsci-test-cache-"))
