"""A bad parameter through papermill's own command line ends in one line, as on normgrow's.

papermill's CLI re-raises a notebook's error as PapermillExecutionError and Python prints that exception's stack
(about 30 lines of click and papermill) before the kernel's one ``error:`` line. This hook, imported at the start of
every interpreter of the environment by a .pth file (``python -m normgrow.papermill_hook`` writes it; ``make install``
runs that), prints the error line alone and exits 2 when the notebook's error is one of normgrow's refusals
(ParamError, RunDirError); every other exception keeps Python's own report.
"""
from __future__ import annotations

import os
import sys

REFUSALS = ("ParamError", "RunDirError")
PTH = "normgrow-papermill.pth"


def _report(etype, value, tb, default=sys.excepthook) -> None:
    if etype.__name__ == "PapermillExecutionError" and getattr(value, "ename", None) in REFUSALS:
        print(f"error: {value.evalue}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2)  # the command line's exit status for a refused parameter
    default(etype, value, tb)


sys.excepthook = _report


def install() -> str:
    """Write the .pth file into this interpreter's site-packages; returns its path."""
    import sysconfig
    from pathlib import Path
    path = Path(sysconfig.get_path("purelib")) / PTH
    path.write_text("import normgrow.papermill_hook\n")
    return str(path)


if __name__ == "__main__":
    print(f"papermill's refusals in one line: {install()}")
