"""pytest_npuperf: build, measure and guard an operator performance database."""

import time as _time

__version__ = "0.1.0"
# When this process first imported the package: where the whole command's wall time starts
# when the operating system cannot say when the process started (see measure/clock.py).
IMPORTED_AT = _time.time()
