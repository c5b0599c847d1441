"""pytest_npuperf: build, measure and guard an operator performance database."""

import time as _time

__version__ = "0.1.0"
# When this process first imported the package (pytest imports it with its plugins), and the
# CPU time the process had used by then: together they date pytest's start (measure/clock.py).
IMPORTED_AT = _time.time()
CPU_AT_IMPORT = _time.process_time()
