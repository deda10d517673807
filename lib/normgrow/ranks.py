"""The processes of one job, on accelerate: data-parallel training (train.processes) and the sharded teacher pass
(teacher.processes).

A job gets its N processes in one of three ways, and the code each process runs is the same in all of them:
  - launched: ``accelerate launch --num_processes N -m normgrow run ...`` (or torchrun) started them; accelerate's
    PartialState gives each its rank. This is the multi-GPU way (one process per GPU, NCCL), and on CPU
    ``accelerate launch --multi_gpu --num_processes N`` starts N gloo processes. The processes setting of the
    profile must equal the launched world size (it is part of a run's identity: it changes the numbers slightly).
  - forked (CPU): a call in one process (a notebook kernel, papermill, the study's workers, a test) asks for N > 1
    processes: accelerate's ``notebook_launcher`` forks N ranks from the caller, which waits. Forked ranks inherit
    what the caller opened (the memory-mapped cache) and set up, and start in a moment.
  - launched by the caller (GPUs): the same call on a CUDA device cannot fork (the caller has made a CUDA context
    already, in its device and dtype checks, and a forked child cannot use it), so the caller runs
    ``accelerate launch`` itself on a pickled (function, arguments) job (run_job below) and relays its output. This
    is what makes ``papermill run_variant.ipynb -p processes 4`` and ``normgrow.study --processes 4`` use 4 GPUs.
In both caller-started ways the ranks meet on a free local port, so two jobs at once never share one, and the caller
is not a rank: rank 0 writes, and the caller reads what it wrote. With N = 1 and no launcher the function runs in
the caller, with no process group and no accelerate state.

A failure on any rank stops all of them; a caller that started them gets RankError with the traceback of the rank
that failed first (in a launched job, the launcher reports it). A collective waits at most RANK_TIMEOUT, so a stalled
rank ends as an error, not a hang.
"""
from __future__ import annotations

import datetime
import gc
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import ParamError
from .utils import atomic_write_json, descendants, read_json, stop_processes

RANK_TIMEOUT = datetime.timedelta(minutes=5)
"""How long a rank waits for the others at a collective before the job fails (gloo's default is 30 minutes)."""


@dataclass(frozen=True)
class Ranks:
    """This process's place in a job of `world` processes; rank 0 is the one that writes."""
    rank: int = 0
    world: int = 1
    local: int = 0  # index on this machine: which GPU a rank of a multi-GPU job uses

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """The rank's device: its own GPU (cuda:<local rank>) in a multi-GPU job, else device itself."""
        return torch.device("cuda", self.local) if self.world > 1 and device.type == "cuda" else device

    def sum(self, values: list[float]) -> list[float]:
        """values summed over the ranks (float64 all_reduce); the values themselves in a single process."""
        if self.world == 1:
            return values
        total = torch.tensor(values, dtype=torch.float64)
        torch.distributed.all_reduce(total)
        return total.tolist()

    def barrier(self) -> None:
        if self.world > 1:
            torch.distributed.barrier()

    def from_main(self, obj):
        """Rank 0's obj on every rank (a picklable object; obj itself in a single process)."""
        if self.world == 1:
            return obj
        box = [obj]
        torch.distributed.broadcast_object_list(box, src=0)
        return box[0]

    @contextmanager
    def main_first(self):
        """Rank 0 runs the body, then the others do (for work with side effects rank 0 must do alone first)."""
        if not self.main:
            self.barrier()
        yield
        if self.main:
            self.barrier()


@contextmanager
def outside_launch():
    """os.environ without the variables a launcher (accelerate launch, torchrun) set for this process, for the time
    of the block: a process started there (the kernel of train.record_notebook) is a job of its own that starts its
    own ranks, instead of a rank that tries to join this job's process group."""
    names = [k for k in os.environ if k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                            "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
                                            "MASTER_ADDR", "MASTER_PORT")
             or k.startswith(("TORCHELASTIC_", "ACCELERATE_"))]
    saved = {k: os.environ.pop(k) for k in names}
    try:
        yield
    finally:
        os.environ.update(saved)


def launched_world() -> int:
    """The world size a launcher (accelerate launch, torchrun) started this process in; 1 when none did."""
    return int(os.environ["WORLD_SIZE"]) if "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ else 1


def check_processes(name: str, processes: int) -> None:
    """In a launched job the setting must be the launched world size: each process runs the whole job once."""
    world = launched_world()
    if world > 1 and processes != world:
        raise ParamError(f"{name}={processes} but this job was launched with {world} processes; set {name}: {world} "
                         f"in the profile (or -y 'overrides: {{{name}: {world}}}')")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _joined_ranks(cpu: bool) -> Ranks:
    """Join the job's process group through accelerate (gloo on CPU, NCCL on GPUs) and say where this process is."""
    from accelerate import PartialState
    state = PartialState(cpu=cpu, timeout=RANK_TIMEOUT)
    return Ranks(state.process_index, state.num_processes, state.local_process_index)


def end_launched_rank() -> None:
    """End a launched rank's process once its work is done and written, without the interpreter's finalization. There
    gloo's worker threads can be torn down unjoined (which object holds them in a training rank was not pinned down),
    and a rank that finished aborts now and then ("terminate called without an active exception", SIGABRT): the
    launcher then reports the whole job failed. os._exit skips finalization, as a forked rank's exit does."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launched_ranks(device: torch.device) -> Ranks:
    """This process's ranks in a launched job (joining its process group), else Ranks() (one process, or a caller
    that will fork them with on_ranks)."""
    return _joined_ranks(device.type == "cpu") if launched_world() > 1 else Ranks()


def _run_rank(cpu: bool, errors: str, fn, args) -> None:
    """Join the job and run fn(ranks, *args); a failure is written to errors/rank<r>.json before it is raised."""
    ranks = _joined_ranks(cpu)
    try:
        fn(ranks, *args)
    except BaseException as err:
        # when one rank fails, the others fail next at their collectives ("connection reset by peer"), and torch
        # reports whichever failure it polls first: the time of each failure tells the caller which came first
        # (written whole or not at all: a rank may be killed mid-write once another has failed)
        atomic_write_json(Path(errors, f"rank{ranks.rank}.json"), {
            "time": time.time(), "rank": ranks.rank, "error": "".join(traceback.format_exception(err)).strip()})
        if isinstance(err, KeyboardInterrupt):  # torch's worker wrapper would end quietly, the caller wait forever
            raise RuntimeError(f"rank {ranks.rank} interrupted (KeyboardInterrupt)") from err
        raise


def _forked_rank(cpu: bool, threads: int, errors: str, fn, args) -> None:
    # Objects inherited from the caller are never collected here: the destructor of one may join a thread that the
    # fork does not have (a TCPStore left by the caller's previous job hung a rank in gc.collect that way).
    gc.freeze()
    torch.set_num_threads(threads)
    # A notebook widget from a forked process never reaches the notebook (ipykernel drops the fork's messages, with a
    # warning per update) while text does: in a forked rank tqdm.auto's bar is the text bar, for our bars
    # (progress_bar) and the libraries' (transformers looks tqdm.auto.tqdm up at each bar, too).
    import tqdm.auto
    import tqdm.std
    tqdm.auto.tqdm = tqdm.std.tqdm
    # accelerate's process state is a per-process singleton: one the caller holds (its own accelerate use, a
    # tracker) would answer this rank's PartialState() with the caller's rank 0 of 1 instead of joining the group
    from accelerate import PartialState
    PartialState._reset_state()
    _run_rank(cpu, errors, fn, args)


class RankError(RuntimeError):
    """A rank the caller started failed: the message is the first failure's traceback (the others' follow from it)."""


def _first_failure(errors: str, processes: int) -> RankError | None:
    failures = sorted((read_json(p) for p in Path(errors).glob("rank*.json")), key=lambda f: f["time"])
    if not failures:
        return None
    return RankError(f"rank {failures[0]['rank']} of {processes} failed first:\n{failures[0]['error']}")


def _forks(device: torch.device) -> bool:
    """Whether a caller's ranks on device are forked (CPU) or launched by the caller (GPUs: see the module docstring)."""
    return device.type == "cpu"


def on_ranks(processes: int, device: torch.device, fn, *args):
    """fn(ranks, *args) on every process of the job (see the module docstring); returns what fn returned in this
    process, or None in a caller that started the ranks (read what rank 0 wrote). A failure of a rank the caller
    started is raised here as RankError carrying the first failing rank's traceback."""
    cpu = device.type == "cpu"
    if launched_world() > 1:
        return fn(_joined_ranks(cpu), *args)
    if processes == 1:
        return fn(Ranks(), *args)
    errors = tempfile.mkdtemp(prefix="normgrow-ranks-")
    try:
        if _forks(device):
            _fork(processes, cpu, errors, fn, args)
        else:
            _launch(processes, cpu, errors, fn, args)
    finally:
        shutil.rmtree(errors, ignore_errors=True)
    return None


def _fork(processes: int, cpu: bool, errors: str, fn, args) -> None:
    from accelerate import notebook_launcher
    threads = max(1, torch.get_num_threads() // processes)
    # OMP_NUM_THREADS set keeps accelerate from choosing the ranks' threads itself (and warning that it did)
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # torch's launcher installs handlers that stop the ranks on these signals and leaves them installed: put the
    # caller's back afterwards (a later Ctrl-C is a KeyboardInterrupt again, not torch's SignalException)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)}
    try:
        notebook_launcher(_forked_rank, args=(cpu, threads, errors, fn, args), num_processes=processes,
                          use_port=_free_port())
    except Exception as err:
        failure = _first_failure(errors, processes)
        if failure is not None:
            raise failure from err
        raise
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous


JOB_FILE = "job.pkl"
"""The pickled (cpu, fn, args) of a job the caller launches; fn must be importable (a module-level function)."""


def _launch(processes: int, cpu: bool, job: str, fn, args) -> None:
    """accelerate launch of run_job on `processes` fresh processes; their output is relayed to this process's stdout
    (a notebook cell shows it). Interrupting the caller stops the launcher and its ranks."""
    with open(Path(job, JOB_FILE), "wb") as f:
        pickle.dump((cpu, fn, args), f)
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", _free_port(), "-m", "normgrow.ranks", job]
    # in the caller's process group: a signal to the group (Ctrl-C in a terminal, a killed job) reaches the ranks too
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tail = b""
    try:
        while chunk := os.read(proc.stdout.fileno(), 65536):
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
            tail = (tail + chunk)[-4000:]
        returncode = proc.wait()
    except BaseException:  # e.g. a notebook's interrupt, which reaches the kernel alone: stop the launcher and ranks
        import psutil
        try:
            launcher = psutil.Process(proc.pid)
            stop_processes([launcher, *descendants(launcher)], timeout=30)
        except psutil.NoSuchProcess:  # the launcher had ended
            pass
        raise
    finally:
        proc.stdout.close()
    if returncode != 0:
        failure = _first_failure(job, processes)
        if failure is not None:
            raise failure
        raise RankError(f"accelerate launch of {processes} processes exited with {returncode}:\n"
                        f"{tail.decode(errors='replace')}")


def run_job(job: str) -> None:
    """One launched rank of a job the caller launched (_launch): python -m normgrow.ranks <job dir>."""
    with open(Path(job, JOB_FILE), "rb") as f:
        cpu, fn, args = pickle.load(f)
    _run_rank(cpu, job, fn, args)


if __name__ == "__main__":
    from normgrow.ranks import end_launched_rank, run_job  # the package's module, not this __main__ copy of it
    run_job(sys.argv[1])
    end_launched_rank()
