"""A child process that ends with its parent: SIGTERM or SIGHUP sent to npuperf (a CI timeout,
a closed terminal) goes on to the child, and npuperf waits for it, so a stopped npuperf never
leaves a profiled workload (or an msprof session) running on its own."""

from __future__ import annotations

import signal
import subprocess
import threading

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))
GRACE_S = 30.0  # how long a child that was passed a stop signal may take to end


def forward_stop_signals(process: subprocess.Popen, received: list[int] | None = None) -> dict:
    """Install handlers that pass SIGTERM / SIGHUP on to `process` (noting each in
    `received`); returns the handlers they replace. Only the main thread can install them."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def forward(number: int, frame) -> None:
        if received is not None:
            received.append(number)
        if process.poll() is None:
            process.send_signal(number)

    return {number: signal.signal(number, forward) for number in STOP_SIGNALS}


def restore(handlers: dict) -> None:
    for number, handler in handlers.items():
        signal.signal(number, handler)


def run_to_end(command: list[str], **popen) -> subprocess.CompletedProcess:
    """`subprocess.run(command, **popen)` that takes its child along when npuperf is stopped:
    the stop signal is passed on, and once the child ended (or after GRACE_S, killed) the
    stop becomes a KeyboardInterrupt here (the command says it was interrupted)."""
    process = subprocess.Popen(command, **popen)
    received: list[int] = []
    handlers = forward_stop_signals(process, received)
    try:
        try:
            out, err = process.communicate()
        except KeyboardInterrupt:  # Ctrl-C reached the child too: let it end
            _end(process)
            raise
        if received:
            raise KeyboardInterrupt(f"stopped by {signal.Signals(received[0]).name}")
        return subprocess.CompletedProcess(command, process.returncode, out, err)
    finally:
        restore(handlers)
        if process.poll() is None:
            _end(process)


def _end(process: subprocess.Popen) -> None:
    try:
        process.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
