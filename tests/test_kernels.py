"""The notebooks' kernels are quiet (normgrow/kernels.py): executing a notebook prints nothing of the kernel's own
(no TCP transport warning), and shutting a finished kernel down sends it no SIGINT (which ipykernel reports as
"KeyboardInterrupt caught in kernel" when it lands inside a message handler)."""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import nbformat

from tiny_study import REPO, study_env


def test_executing_a_notebook_prints_nothing_from_its_kernel(tmp_path):
    notebook = tmp_path / "n.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import torch\nprint(torch.ones(2).sum().item())")]
    nbformat.write(nb, notebook)
    code = ("from pathlib import Path; from normgrow.utils import execute_notebook; "
            f"execute_notebook(Path({str(notebook)!r}), Path({str(tmp_path / 'out.ipynb')!r}), {{}})")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=study_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout + proc.stderr == "", proc.stdout + proc.stderr  # no kernel warning, no KeyboardInterrupt
    assert "2.0" in "".join(o.get("text", "") for o in nbformat.read(tmp_path / "out.ipynb", 4).cells[0].outputs)


def test_a_finished_kernel_is_shut_down_without_an_interrupt():
    from normgrow.kernels import QuietKernelManager

    async def lifetime() -> list:
        km = QuietKernelManager(kernel_name="python3")
        sent = []
        signal_kernel = km._async_signal_kernel
        km._async_signal_kernel = lambda signum: sent.append(signum) or signal_kernel(signum)
        await km.start_kernel()
        assert km.transport == "ipc"
        await km.shutdown_kernel()
        return sent
    assert signal.SIGINT not in asyncio.run(lifetime())
