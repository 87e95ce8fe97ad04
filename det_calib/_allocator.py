"""Memory: polars' allocator returns freed pages at once (imported first by the package).

Polars allocates through jemalloc, which by default keeps freed pages for about ten seconds
before handing them back. At COCO scale every temporary of reading, filtering and joining the box
table then stays resident: reading the capture parts of a 5,000-image split left 0.4 GiB more
resident than with the pages returned (``benchmarks/bench_scale.py``, the "read boxes" stage).
jemalloc reads its options once, when polars is first imported, from ``_RJEM_MALLOC_CONF``: this
sets it, unless the user did, so that it applies when det_calib is imported before polars (the
command line, and any script that imports det_calib first).
"""

from __future__ import annotations

import os

os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0")
