"""docker-compose.yml run for real: `python -m tests.compose.run` (make compose-test).

The modules reuse tests/support/ (imported as `support`, as tests/conftest.py does).
"""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
