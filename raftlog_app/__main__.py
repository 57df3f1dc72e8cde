"""`python -m raftlog_app`: the `raftlog` command."""

import sys

from raftlog_app.entry import main

sys.exit(main())
