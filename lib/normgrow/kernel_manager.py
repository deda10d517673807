"""The kernel manager of every notebook a command executes (utils.execute_notebook): jupyter_client's
AsyncKernelManager (nbclient's default) with two changes, each removing a line a normal run printed from its kernel
into the runner's output.

  - transport ipc: the kernel's sockets are Unix domain sockets in Jupyter's runtime folder (a path of their own per
    kernel) instead of TCP ports on localhost, so ipykernel has no reason to warn "Kernel is running over TCP without
    encryption" (it warns for every TCP kernel without CurveZMQ keys), and no port is open to other users of the
    machine.
  - no interrupt at shutdown: jupyter_client's graceful shutdown sends SIGINT before its shutdown request, to stop a
    running cell. nbclient shuts a kernel down only after its last cell has finished, so the signal stops nothing;
    when it lands while the kernel is still in a message handler (after the last reply, before the handler returns)
    ipykernel logs "KeyboardInterrupt caught in kernel". A kernel that must stop (Ctrl-C, SIGTERM of the runner) is
    terminated by runner.kill_descendants, not interrupted.
"""
from __future__ import annotations

import os
from uuid import uuid4

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_runtime_dir
from traitlets import CaselessStrEnum, default


class QuietKernelManager(AsyncKernelManager):
    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _unique_ipc_path(self) -> str:
        """The prefix of this kernel's socket files: unique, in Jupyter's runtime folder. jupyter_client's default,
        kernel-ipc-<n> in the working directory, is the same for every kernel started there at once (the runners'
        workers all execute run_variant.ipynb from notebooks/): two such kernels read each other's messages
        ("Invalid Signature") and hang."""
        folder = jupyter_runtime_dir()
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f"normgrow-{uuid4().hex[:16]}-ipc")

    async def _async_interrupt_kernel(self) -> None:
        if not self.shutting_down:
            await super()._async_interrupt_kernel()
