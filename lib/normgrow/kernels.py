"""The kernel manager of every notebook a command executes (utils.execute_notebook): jupyter_client's
AsyncKernelManager (nbclient's default) with two changes, each removing a line a normal run printed from its kernel
into the runner's output.

  - transport ipc: the kernel's sockets are Unix domain sockets in Jupyter's runtime folder instead of TCP ports on
    localhost, so ipykernel has no reason to warn "Kernel is running over TCP without encryption" (it warns for
    every TCP kernel without CurveZMQ keys), and no port is open to other users of the machine.
  - no interrupt at shutdown: jupyter_client's graceful shutdown sends SIGINT before its shutdown request, to stop a
    running cell. nbclient shuts a kernel down only after its last cell has finished, so the signal stops nothing;
    when it lands while the kernel is still in a message handler (after the last reply, before the handler returns)
    ipykernel logs "KeyboardInterrupt caught in kernel". A kernel that must stop (Ctrl-C, SIGTERM of the runner) is
    terminated by study.kill_descendants, not interrupted.
"""
from __future__ import annotations

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum


class QuietKernelManager(AsyncKernelManager):
    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    async def _async_interrupt_kernel(self) -> None:
        if not self.shutting_down:
            await super()._async_interrupt_kernel()
