"""What a long step shows while it works: progress bars and announcements, on stdout, and from a notebook kernel
also on the terminal the kernel was started in (the card's headless papermill command shows them there)."""
from __future__ import annotations

import os
import sys
import time


RUNNER_KERNEL = "NORMGROW_RUNNER_KERNEL"
"""Set in the runner's workers (runner._worker_init), so in the kernels they start: the runner reports its runs'
progress itself, and their bars stay in their notebooks."""


class _NotebookAndTerminal:
    """Where a notebook kernel's bar is written: every redraw to the terminal the kernel was started in, so that a
    headless papermill run shows its progress there without --log-output; to the notebook (the kernel's stdout) at
    most every NOTEBOOK_EVERY seconds and at the end, so that an executed notebook keeps a few dozen lines of it, the
    last one the finished bar. Written to the notebook by this process itself: a forked rank's stdout reaches it,
    while what reaches the kernel's file descriptor 2 is copied there by a thread that may not have read the last
    lines when the cell ends."""
    NOTEBOOK_EVERY = 10.0

    def __init__(self, terminal):
        self.terminal, self.pending, self.sent = terminal, "", time.monotonic()

    def write(self, text: str) -> None:
        self.terminal.write(text)
        # tqdm redraws the whole line, starting with a carriage return: only the latest redraw is kept
        self.pending = text if text.startswith("\r") else self.pending + text
        if "\n" in text or time.monotonic() - self.sent >= self.NOTEBOOK_EVERY:
            sys.stdout.write(self.pending)
            self.pending, self.sent = "", time.monotonic()

    def flush(self) -> None:
        self.terminal.flush()
        sys.stdout.flush()


def _kernel_terminal():
    """The stream a notebook kernel was started with: ipykernel points file descriptor 2 at a pipe it copies into
    the notebook, and keeps the original as its stderr's fileno()."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return open(fd, "w", closefd=False)


def _own_kernel_terminal():
    """The terminal of a notebook kernel that is not one of the runner's (they report their runs themselves), else
    None: where the card's papermill command shows a kernel's bars and announcements."""
    kernel = "ipykernel" in sys.modules and sys.stdout is not sys.__stdout__
    return _kernel_terminal() if kernel and not os.environ.get(RUNNER_KERNEL) else None


def say(text: str) -> None:
    """A line that announces a step (a one-time build, what it costs): on stdout, and on a kernel's own terminal."""
    print(text, flush=True)
    terminal = _own_kernel_terminal()
    if terminal is not None:
        terminal.write(text + "\n")
        terminal.flush()


def progress_bar(**kwargs):
    """The text bar (tqdm.std): a widget bar's state is not saved with a headless notebook (papermill's output read
    0/24 for a finished run) and never reaches papermill's --log-output, where text does. On stdout in a terminal. In
    a notebook kernel that is not one of the runner's (they report their runs' progress themselves), redrawn every
    2 s on the kernel's terminal and every 10 s in the notebook (_NotebookAndTerminal). Elsewhere on stdout, redrawn
    every 10 s at most."""
    import tqdm.std
    terminal = _own_kernel_terminal()
    if terminal is not None:
        return tqdm.std.tqdm(file=_NotebookAndTerminal(terminal), mininterval=2.0, **kwargs)
    return tqdm.std.tqdm(file=sys.stdout, mininterval=0.1 if sys.stdout.isatty() else 10.0, **kwargs)
