"""The notebooks' kernels are quiet (normgrow/kernel_manager.py): executing a notebook prints nothing of the kernel's own
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
    from normgrow.kernel_manager import QuietKernelManager

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


def test_notebooks_executed_at_once_in_one_folder_each_talk_to_their_own_kernel(tmp_path):
    """Two notebooks of one folder executed at the same time, as the runners' workers execute run_variant.ipynb:
    both finish with their own outputs. Their ipc sockets once shared jupyter_client's default path (kernel-ipc-N in
    the working directory), and each kernel read the other's messages ("Invalid Signature") and hung."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(f"import time\nfor i in range(20):\n    time.sleep(0.05)\nprint('{w}')")
                for w in ("first", "second")]
    for name in ("a", "b"):
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    code = ("import sys; from pathlib import Path; from normgrow.utils import execute_notebook; "
            "execute_notebook(Path(sys.argv[1]), Path(sys.argv[2]), {})")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / f"{n}.ipynb"), str(tmp_path / f"{n}-out.ipynb")],
                              cwd=REPO, env=study_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for n in ("a", "b")]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and not any("Invalid Signature" in o for o in outs), outs
    for n in ("a", "b"):
        cells = nbformat.read(tmp_path / f"{n}-out.ipynb", 4).cells
        assert ["".join(o.get("text", "") for o in c.outputs).strip() for c in cells] == ["first", "second"]
