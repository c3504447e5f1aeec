"""A quiet console for the command-line tools: TensorFlow's native log lines filtered out of stderr.

TensorFlow 2.16+ logs through absl from C++ before its Python side can configure anything, so
``TF_CPP_MIN_LOG_LEVEL`` no longer hides the start-up lines: absl's "All log messages before
absl::InitializeLog() is called are written to STDERR", the oneDNN notice, "Could not find cuda
drivers", ``E0000 ... failed call to cuInit``, the AVX-512 ``DT_BOOL`` line, cpu_feature_guard. They
say nothing a user of r2d2kit can act on, and inside the progress bar they tear it.

:func:`quiet_native_logs` puts a filter on file descriptor 2 itself (a pipe read by a thread), so it
also catches what native code writes and what spawned actor and trial processes write: they inherit
the descriptor. Lines in absl's format (``I0000 00:00:1795856059.645817 4950 port.cc:153] ...``) at
levels I, W and E are dropped; F (fatal) lines and everything else pass unchanged. It changes no
numerics (``TF_ENABLE_ONEDNN_OPTS`` is left alone). A user who sets ``TF_CPP_MIN_LOG_LEVEL``
themselves gets the unfiltered stream: ``TF_CPP_MIN_LOG_LEVEL=0 python -m r2d2kit.train ...`` shows
every line.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
from typing import NoReturn

__all__ = ["NATIVE_LOG_LINE", "exit_without_teardown", "filter_native_lines", "quiet_native_logs"]

# absl's prefix: level letter, MMDD, time, thread id, file:line]; and absl's own pre-init warning.
# cpu_feature_guard's message runs over two lines; its second ("To enable the following instructions: AVX2 ...,
# in other operations, rebuild TensorFlow ...") has no prefix of its own.
NATIVE_LOG_LINE = re.compile(
    rb"[IWE]\d{4} [\d:.]+\s+\d+ [\w.\-/]+:\d+\] .*|WARNING: All log messages before absl::InitializeLog\(\) .*"
    rb"|To enable the following instructions: .*rebuild TensorFlow with the appropriate compiler flags\.")
# the prefix Ray's driver puts before each line of an actor's output, e.g. "\x1b[36m(ActorBody pid=3928)\x1b[0m ":
# a native line behind it is dropped with it (kept, the prefixes of dropped lines glued the next lines together)
RAY_LINE_PREFIX = re.compile(rb"(?:\x1b\[[0-9;]*m)?\([^()\n]* pid=\d+[^()\n]*\)(?:\x1b\[[0-9;]*m)? *")
_state: dict[str, object] = {}
# written into the pipe by _restore after this process's last line: the filter shows everything before it and
# ends there, rather than waiting for end-of-file (which never comes while a child that inherited the descriptor
# lives on, e.g. multiprocessing's resource tracker until this process is gone)
END_MARK = b"\0r2d2kit-stderr-filter-end\0"


def filter_native_lines(data: bytes) -> tuple[bytes, bytes]:
    """Split ``data`` into (what to show now, what to hold): complete lines lose any native log line (from its
    prefix to its end, so a progress bar the line was written into keeps its part; a Ray actor's line prefix goes
    with it); an incomplete tail is shown at once unless it already holds a native prefix, whose line is then
    held until it ends."""
    *lines, tail = data.split(b"\n")
    shown = []
    for line in lines:
        match = NATIVE_LOG_LINE.search(line)
        if match is None:
            shown.append(line + b"\n")
        elif match.start() > 0 and not RAY_LINE_PREFIX.fullmatch(line[:match.start()]):
            shown.append(line[:match.start()])  # a bar's partial line, without the native line's newline
    if NATIVE_LOG_LINE.search(tail):
        return b"".join(shown), tail
    return b"".join(shown) + tail, b""


def quiet_native_logs() -> bool:
    """Filter native log lines out of this process's stderr (and its children's); True if the filter is on.

    Call it first thing in a command-line entry point, before TensorFlow loads. It does nothing when the
    user set ``TF_CPP_MIN_LOG_LEVEL`` (they asked for the stream as it is), when it is already on, or when
    stderr cannot be redirected. Not for library code: it takes over the process's file descriptor 2.
    """
    if "TF_CPP_MIN_LOG_LEVEL" in os.environ or "thread" in _state:
        return "thread" in _state
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"  # Python-side TensorFlow logging too; spawned processes inherit it
    try:
        original = os.dup(2)
        read_end, write_end = os.pipe()
        sys.stderr.flush()
        os.dup2(write_end, 2)
    except OSError:  # no usable descriptor 2 (a daemon, an embedded interpreter): leave it alone
        return False
    os.close(write_end)
    thread = threading.Thread(target=_pump, args=(read_end, original), name="r2d2kit-stderr-filter", daemon=True)
    thread.start()
    _state.update(thread=thread, original=original)
    atexit.register(_restore)
    return True


def exit_without_teardown(status: int) -> NoReturn:
    """End a command with ``status`` once every exit handler ran, skipping the interpreter's teardown.

    Why: with TensorFlow loaded, freeing every module and running TensorFlow's native destructors takes
    seconds on busy cores, between a command's last line and its exit, and a finished command needs none
    of it: its files are closed, its actor processes reaped and its shared memory unlinked by then. The exit
    handlers still run (this filter's drain, multiprocessing's and Ray's clean-ups), then the standard
    streams are flushed. For a command's ``__main__`` only, never for library code.
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(status)


def _pump(read_end: int, original: int) -> None:
    """Copy the pipe to the real stderr, line by line, without the native log lines."""
    held = b""
    while True:
        try:
            chunk = os.read(read_end, 65536)
        except OSError:
            chunk = b""
        data = held + chunk
        end = data.find(END_MARK)
        if not chunk or end >= 0:  # every writer closed its end, or this process wrote its last line
            if end >= 0:
                data = data[:end] + data[end + len(END_MARK):]
            shown, held = filter_native_lines(data)
            tail = held if held and not NATIVE_LOG_LINE.search(held) else b""
            try:
                os.write(original, shown + tail)
            except OSError:
                pass
            return
        shown, held = filter_native_lines(data)
        if shown:
            try:
                os.write(original, shown)
            except OSError:
                return


def _restore() -> None:
    """At exit: mark the end of this process's output, give descriptor 2 back and let the filter show what is
    still in the pipe up to the mark (the wait is bounded)."""
    thread, original = _state.get("thread"), _state.get("original")
    if not isinstance(thread, threading.Thread) or not isinstance(original, int):
        return
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    try:
        os.write(2, END_MARK)  # one write shorter than PIPE_BUF: atomic, after everything written before
    except OSError:
        pass
    os.dup2(original, 2)  # closes this process's write end of the pipe
    thread.join(timeout=2.0)
