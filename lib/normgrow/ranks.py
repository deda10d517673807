"""The processes of one job, on accelerate: data-parallel training (train.processes) and the sharded teacher pass
(teacher.processes).

A job gets its N processes in one of two ways, and the code each process runs is the same in both:
  - launched: ``accelerate launch --num_processes N -m normgrow run ...`` (or torchrun) started them; accelerate's
    PartialState gives each its rank. This is the multi-GPU way (one process per GPU, NCCL), and on CPU
    ``accelerate launch --multi_gpu --num_processes N`` starts N gloo processes. The processes setting of the
    profile must equal the launched world size (it is part of a run's identity: it changes the numbers slightly).
  - forked (CPU): a call in one process (a notebook kernel, papermill, the study's workers, a test) asks for N > 1
    processes: accelerate's ``notebook_launcher`` forks N ranks from the caller, which waits. Not on GPUs: the
    caller has made a CUDA context already (device and dtype checks), which forked children cannot use. Forked ranks inherit
    what the caller opened (the memory-mapped cache) and set up; they meet on a free local port, so two jobs at once
    never share one. The caller is not a rank: rank 0 writes, and the caller reads what it wrote.
With N = 1 and no launcher the function runs in the caller, with no process group and no accelerate state.

A failure on any rank stops all of them; a caller that forked them gets RankError with the traceback of the rank
that failed first (in a launched job, the launcher reports it). A collective waits at most RANK_TIMEOUT, so a stalled rank ends as an error, not a hang.
"""
from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import tempfile
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from .config import ParamError

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


def launched_ranks(device: torch.device) -> Ranks:
    """This process's ranks in a launched job (joining its process group), else Ranks() (one process, or a caller
    that will fork them with on_ranks)."""
    return _joined_ranks(device.type == "cpu") if launched_world() > 1 else Ranks()


def _forked_rank(cpu: bool, threads: int, errors: str, fn, args) -> None:
    ranks = _joined_ranks(cpu)
    torch.set_num_threads(max(1, threads // ranks.world))
    try:
        fn(ranks, *args)
    except BaseException as err:
        # when one rank fails, the others fail next at their collectives ("connection reset by peer"), and torch
        # reports whichever failure it polls first: the time of each failure tells the caller which came first
        Path(errors, f"rank{ranks.rank}.json").write_text(json.dumps(
            {"time": time.time(), "rank": ranks.rank, "error": "".join(traceback.format_exception(err)).strip()}))
        if isinstance(err, KeyboardInterrupt):  # torch's worker wrapper would end quietly, the caller wait forever
            raise RuntimeError(f"rank {ranks.rank} interrupted (KeyboardInterrupt)") from err
        raise


class RankError(RuntimeError):
    """A forked rank failed: the message is the first failure's traceback (the others' follow from it)."""


def on_ranks(processes: int, device: torch.device, fn, *args):
    """fn(ranks, *args) on every process of the job (see the module docstring); returns what fn returned in this
    process, or None in a caller that forked the ranks (read what rank 0 wrote). A failure of a forked rank is raised
    here as RankError carrying the first failing rank's traceback."""
    cpu = device.type == "cpu"
    if launched_world() > 1:
        return fn(_joined_ranks(cpu), *args)
    if processes == 1:
        return fn(Ranks(), *args)
    if not cpu:
        # the caller has touched CUDA already (device and bf16 checks), and a forked child cannot use a CUDA context
        # made before the fork: GPU ranks are started fresh by a launcher instead
        raise ParamError(f"{processes} processes on {device} need a launched job: accelerate launch --num_processes "
                         f"{processes} -m normgrow run ... (or ... -m normgrow cache ...); forked ranks run on CPU only")
    from accelerate import notebook_launcher
    threads = torch.get_num_threads()
    errors = tempfile.mkdtemp(prefix="normgrow-ranks-")
    # OMP_NUM_THREADS set keeps accelerate from choosing the ranks' threads itself (and warning that it did)
    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(max(1, threads // processes))
    try:
        notebook_launcher(_forked_rank, args=(cpu, threads, errors, fn, args), num_processes=processes,
                          use_port=_free_port())
    except Exception as err:
        failures = sorted((json.loads(p.read_text()) for p in Path(errors).glob("rank*.json")), key=lambda f: f["time"])
        if failures:
            first = failures[0]
            raise RankError(f"rank {first['rank']} of {processes} failed first:\n{first['error']}") from err
        raise
    finally:
        shutil.rmtree(errors, ignore_errors=True)
        if previous is None:
            del os.environ["OMP_NUM_THREADS"]
        else:
            os.environ["OMP_NUM_THREADS"] = previous
    return None
