"""Small shared helpers: content hashing, atomic writes, disk-full errors, device / dtype resolution, stopping
processes, executing a notebook."""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import platform
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import torch


def stable_hash(obj: Any, length: int = 12) -> str:
    """Hash of a JSON-serialisable object, independent of dict order."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks (OpenSSL uses SHA-NI where the CPU has it)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# torch.save's RuntimeError when a write fails: "[enforce fail at inline_container.cc:...] ... file write failed"
TORCH_WRITE_FAILED = "inline_container"


@contextmanager
def disk_full_errors(path: Path):
    """Re-raise a write that failed for lack of space as OSError(ENOSPC) whose message says "no space left on
    device", names the file (the failing call's filename, else ``path``) and the way forward.

    torch.save reports a failed write as a RuntimeError from inline_container.cc without the errno; it is mapped
    too, saying that a full disk is the usual cause (the original message follows)."""
    try:
        yield
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
        raise _disk_full(e.filename or path, "") from e
    except RuntimeError as e:
        if TORCH_WRITE_FAILED not in str(e):
            raise
        raise _disk_full(path, f" (torch: {str(e).strip()[:200]}; a full disk is the usual cause)") from e


def _disk_full(path, detail: str) -> OSError:
    where = Path(path)
    return OSError(errno.ENOSPC, f"no space left on device while writing {where}{detail}; free space on that "
                                 f"filesystem (df -h {where.parent}) and run again")


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so readers never see a half-written file. A failed write removes the
    temporary file (a full disk raises OSError(ENOSPC) naming path, see disk_full_errors)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # per process: concurrent writers never share it
    try:
        with disk_full_errors(path):
            tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def json_safe(obj: Any) -> Any:
    """obj with every non-finite float (NaN, infinity) as None, inside mappings and lists too: strict JSON, which
    JSON.parse and most readers require (Python's json writes a bare NaN, which they reject)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def atomic_write_json(path: Path, obj: Any) -> None:
    """obj as strict JSON (json_safe: a missing number is null), indented, keys sorted, written atomically."""
    atomic_write_text(path, json.dumps(json_safe(obj), indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device={name!r} requested but CUDA is not available; use device: auto or cpu")
    return device


NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 instructions that compute bf16 dot products in hardware


def cpu_flags() -> frozenset:
    """The CPU feature flags of /proc/cpuinfo (empty where there is none: non-Linux systems)."""
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        return frozenset()
    for line in info.read_text().splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_kind() -> str:
    """The CPU kind a figure of speed belongs to: amx (AMX-BF16), avx512bf16 (AVX512-BF16 without AMX) or nobf16
    (bf16 emulated, e.g. AVX2 only, where bf16 runs tens of times slower than float32). Each kind has its own fastest
    dtype and its own step time, so benchmarks are kept per kind, never overwritten by another kind's."""
    flags = cpu_flags()
    return "amx" if "amx_bf16" in flags else "avx512bf16" if "avx512_bf16" in flags else "nobf16"


def cpu_model() -> str:
    """The CPU's model name as lscpu gives it (platform.processor() where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return platform.processor()
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name:")]
    return names[0] if names else platform.processor()


def machine_description() -> dict:
    """What a run's numbers may depend on beyond its parameters: the CPU model and its bf16 instructions (bf16
    matmuls round differently on AMX, AVX512-BF16 and emulated paths, and a study trained on two CPUs differs by
    that rounding), and the GPU where CUDA is present. Recorded with each run (config.json's environment), never
    compared."""
    flags = cpu_flags()
    description = {"cpu": cpu_model(), "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags}
    if torch.cuda.is_available():
        description["gpu"] = torch.cuda.get_device_name()
    return description


def bf16_supported(device: torch.device) -> bool:
    """Whether bf16 compute is native (fast) on device: CUDA with bf16; on x86, AMX-BF16 or AVX512-BF16.

    Not oneDNN's own check (torch.ops.mkldnn._is_mkldnn_bf16_supported): it also says yes on plain AVX512, where
    bf16 is emulated and slower than float32. An x86 CPU whose flags cannot be read gets float32 (safe, never
    60x slow); other CPUs (ARM) fall back to oneDNN's check."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686"):
        return bool(set(NATIVE_BF16_FLAGS) & cpu_flags())
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> 'bfloat16' (the spelling of the dtype options and of teacher.json)."""
    return str(dtype).removeprefix("torch.")


DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
"""The dtype options by name: teacher.dtype allows 'auto' and all of them."""
TRAIN_DTYPES = ("auto", "bfloat16", "float32")
"""train.dtype and bench --dtype: autocast dtypes (float16 autocast would need a grad scaler, which train/run.py lacks)."""


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """'auto' means bf16 where the hardware supports it, else float32."""
    if name == "auto":
        return torch.bfloat16 if bf16_supported(device) else torch.float32
    return DTYPES[name]


RESOURCE_TRACKER = "from multiprocessing.resource_tracker import main"  # a tracker's command line (multiprocessing)


def descendants(process) -> list:
    """The psutil process's descendants to stop, multiprocessing's resource trackers excepted.

    A tracker ignores SIGTERM and ends by itself once the processes it serves have ended, cleaning up after them;
    killed, it is replaced by one that knows none of the pool's semaphores, which fills the log with tracebacks."""
    import psutil

    def is_tracker(p) -> bool:
        try:
            return RESOURCE_TRACKER in " ".join(p.cmdline())
        except psutil.Error:  # gone meanwhile, or not ours to read
            return False
    return [p for p in process.children(recursive=True) if not is_tracker(p)]


def stop_processes(processes: list, timeout: float = 5.0) -> None:
    """Terminate the psutil processes, then kill those still alive after timeout seconds (gone ones are skipped)."""
    import psutil
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    for process in psutil.wait_procs(processes, timeout=timeout)[1]:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def execute_notebook(notebook: Path, output: Path, parameters: dict) -> None:
    """Execute notebook with papermill into output, in the notebook's folder (its relative paths hold) and on the
    python3 kernel under kernels.QuietKernelManager (no transport warning, no interrupt at shutdown); no progress
    bar or cell output on the terminal (callers report their own progress)."""
    import papermill as pm

    from .kernel_manager import QuietKernelManager
    output.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(str(notebook), str(output), parameters=parameters, cwd=str(notebook.parent),
                        kernel_name="python3", progress_bar=False, log_output=False,
                        kernel_manager_class=QuietKernelManager)


def peak_size(dtype: torch.dtype, target_s: float = 0.1, largest: int = 2048) -> int:
    """The n (a multiple of 256, at most largest) whose n x n x n matmul in dtype takes about target_s here, from one
    timed 256-cube product: a bf16 product on a CPU without native bf16 runs about 60x slower than float32, and the
    2048-cube sample took minutes there."""
    a = torch.randn(256, 256).to(dtype)
    a @ a
    t0 = time.perf_counter()
    a @ a
    elapsed = max(time.perf_counter() - t0, 1e-9)
    return int(min(largest, max(256, 256 * (target_s / elapsed) ** (1 / 3) // 256 * 256)))


def matmul_peak_sampler(dtype: torch.dtype, n: int = 2048) -> Callable[[], float]:
    """A function returning one sample of the FLOP/s of an n x n x n matmul in dtype (one warmup product here).
    The bench takes one sample per round, after the round's candidates, so that the peak sees the load they saw; the
    teacher pass one after its pass (data.teacher_cache)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b

    def sample() -> float:
        t0 = time.perf_counter()
        a @ b
        return 2 * n ** 3 / (time.perf_counter() - t0)
    return sample
