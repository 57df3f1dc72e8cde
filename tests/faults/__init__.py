"""Network fault suite: three raftlog nodes in their own network namespaces, real faults.

`python -m tests.faults.run --cycles N` runs it; tests/faults/README.md explains the pieces.
The modules reuse tests/support/ (imported as `support`, as tests/conftest.py does), so the
package works both as `tests.faults` (python -m) and as `faults` (pytest's rootdir import).
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
