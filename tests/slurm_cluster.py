"""A one-node SLURM cluster on this machine for the slurm executor's tests (test_slurm.py): munged, slurmctld and
slurmd (Debian packages munge and slurm-wlm) with a minimal slurm.conf: this host, its CPUs (at most 2), no cgroup
plugins (ProctrackType=proctrack/linuxproc, TaskPlugin=task/none), no accounting database; every key, state directory,
log and socket under one folder, on ports free when it starts. The daemons run as the user running the tests, which
must be root (slurmd starts jobs as their submitter)."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

COMMANDS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


def missing() -> str | None:
    """Why a cluster cannot start here, or None."""
    absent = [c for c in COMMANDS if shutil.which(c) is None]
    if absent:
        return (f"{', '.join(absent)} not found: install the Debian packages slurm-wlm and munge "
                "(apt-get install slurm-wlm munge) to run the slurm executor's tests")
    if os.geteuid() != 0:
        return "a one-node SLURM cluster here runs slurmd as root, and these tests do not run as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CONF = """ClusterName=normgrow-test
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
AuthInfo=socket={root}/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=300
KillWait=5
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


class Cluster:
    """The cluster's folder and the environment that points SLURM's commands (and so submitit) at it."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"

    @property
    def env(self) -> dict:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(command, env=os.environ | self.env, capture_output=True, text=True, timeout=60,
                              check=check)

    def start(self) -> "Cluster":
        root = self.root
        for folder in ("state", "spool"):
            (root / folder).mkdir(parents=True)
        root.chmod(0o700)  # munged refuses a key or socket in a folder others can write
        subprocess.run(["mungekey", "--create", f"--keyfile={root / 'munge.key'}"], check=True, capture_output=True)
        subprocess.run(["munged", "--force", f"--socket={root / 'munge.socket'}", f"--key-file={root / 'munge.key'}",
                        f"--log-file={root / 'munged.log'}", f"--pid-file={root / 'munged.pid'}",
                        f"--seed-file={root / 'munged.seed'}"], check=True, capture_output=True)
        self.conf.write_text(CONF.format(host=socket.gethostname().split(".")[0], root=root, cpus=min(os.cpu_count(), 2),
                                         ctld_port=_free_port(), d_port=_free_port()))
        self.run("slurmctld", "-f", str(self.conf), "-i")
        self.run("slurmd", "-f", str(self.conf))
        deadline = time.time() + 60
        while self.run("sinfo", "--noheader", "--format=%T", check=False).stdout.strip() != "idle":
            if time.time() > deadline:
                raise RuntimeError(f"the node did not come up: {(root / 'slurmctld.log').read_text()[-2000:]}")
            time.sleep(0.5)
        return self

    def stop(self) -> None:
        """Cancel every job, then stop slurmd, slurmctld and munged (their pid files), waiting for each to exit."""
        self.run("scancel", "--full", "--user=root", check=False)
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            if not pid_file.is_file():
                continue
            pid = int(pid_file.read_text().split()[0])
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.time() + 30
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.2)
            else:
                os.kill(pid, signal.SIGKILL)

    def job_state(self, job_id: str) -> str | None:
        """The job's state while the cluster holds it in its queue (squeue), else None."""
        out = self.run("squeue", "--noheader", "--format=%T", f"--jobs={job_id}", check=False).stdout.strip()
        return out or None
