"""Cache directories (the corpus cache, corpus.py, and the teacher cache, teacher_cache.py): a build happens in a temp
directory (``temp_build_dir``), ``publish`` records every file's size and sha256 in ``checksums.json``, writes
``COMPLETE`` and renames the directory into place; ``verify_cache`` checks them at every open (see there).
"""
from __future__ import annotations

import glob
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from ..utils import atomic_write_json, disk_full_errors, file_sha256, read_json


def marker_key(d: Path) -> str | None:
    """The key d's COMPLETE marker holds (written last by publish), or None when it is absent, empty or unreadable."""
    try:
        return (d / "COMPLETE").read_text().strip() or None
    except OSError:
        return None


def is_complete(d: Path, key: str) -> bool:
    """Whether d holds the COMPLETE marker of key (says nothing about damage since)."""
    return marker_key(d) == key


class CacheMismatchError(RuntimeError):
    """A cache directory that is not the cache asked for: its marker, meta.json, shapes or contents say it holds
    another one (teacher_cache.check_cache). Never deleted nor rebuilt automatically: the message says what to do.
    finding: the failed check alone (file, field, values), for messages that give their own advice."""

    def __init__(self, message: str, finding: str | None = None):
        super().__init__(message)
        self.finding = finding or message


def check_marker(d: Path, key: str) -> None:
    """CacheMismatchError naming both keys when d's COMPLETE marker names a key other than key: d then holds another
    complete cache (copied or renamed here), which no builder deletes. An absent marker (an interrupted build) is
    the builders' to clear."""
    other = marker_key(d)
    if other is not None and other != key:
        raise CacheMismatchError(
            f"{d / 'COMPLETE'} names the cache key {other}, but this directory is where the cache of key {key} "
            f"belongs: it holds another, complete cache, copied or renamed here. Nothing was deleted; move it to "
            f"{d.parent / other} (its own name) or delete it (rm -rf {d}), then retry")


CHECKSUMS = "checksums.json"  # {relative path: {"bytes": size, "sha256": hex}} of every file of a cache directory


class CacheDamagedError(RuntimeError):
    """A complete cache directory whose files no longer match what was recorded at build time."""


def _checksums(d: Path) -> dict:
    return {f.relative_to(d).as_posix(): {"bytes": f.stat().st_size, "sha256": file_sha256(f)}
            for f in sorted(d.rglob("*")) if f.is_file() and f.name not in ("COMPLETE", CHECKSUMS)}


def _npy_bytes(path: Path) -> int:
    """The size a .npy file must have: its header's length plus shape x itemsize (from the header alone)."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        shape, _, dtype = read_header[version](fh)
        return fh.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def verify_cache(d: Path) -> None:
    """Check a complete cache directory before it is read; raise CacheDamagedError naming the first bad file.

    Every .npy file has the size its header implies (a truncated array otherwise fails later with numpy's "mmap
    length is greater than file size"), and every file recorded in checksums.json exists with its recorded size and
    sha256, so same-size garbage is caught too. The sha256 of the 109 MB cpu-profile teacher cache takes 0.08 s (AMD
    EPYC, page cache warm), so it runs at every open rather than once behind a stamp.

    checksums.json is written only by publish, from the files the build itself wrote. A cache without it (built
    before it existed, or with it deleted) cannot prove its files are those: it is damaged like one whose files
    differ, and never gets a record written from files that may already be damaged (the teacher cache then
    checks every row to name what is wrong: teacher_cache.full_check).
    """
    d = Path(d)
    try:
        for f in sorted(d.rglob("*.npy")):
            have, need = f.stat().st_size, _npy_bytes(f)
            if have != need:
                raise CacheDamagedError(f"{f}: {have} bytes, its header needs {need} (truncated or overwritten)")
        if not (d / CHECKSUMS).is_file():
            raise CacheDamagedError(f"{d / CHECKSUMS}: missing, so the files cannot be proven to be those the build "
                                    "wrote (only a build records checksums)")
        for name, want in read_json(d / CHECKSUMS).items():
            f = d / name
            if not f.is_file():
                raise CacheDamagedError(f"{f}: missing")
            if f.stat().st_size != want["bytes"]:
                raise CacheDamagedError(f"{f}: {f.stat().st_size} bytes, {want['bytes']} recorded at build time")
            if file_sha256(f) != want["sha256"]:
                raise CacheDamagedError(f"{f}: content differs from the sha256 recorded at build time")
    except (OSError, ValueError, KeyError) as e:  # unreadable header / checksums.json
        raise CacheDamagedError(f"{d}: {type(e).__name__}: {e}") from e


def damaged_message(d: Path, e: CacheDamagedError) -> str:
    return (f"cache {d} is damaged: {e}. Delete it (rm -rf {d}); the next build (ensure_cache, a run, or "
            f"notebooks/00_teacher.ipynb) rebuilds it")


def reuse_or_clear(d: Path, key: str, explain=None) -> bool:
    """For the builders: True if d is a complete, undamaged cache of key (ready to open); otherwise delete whatever
    is there (an interrupted or damaged build is never read) and return False. Damage is rebuilt automatically,
    as a missing marker always was, with a message naming the bad file; explain(d, error), when given, returns a
    CacheDamagedError saying more (the teacher cache's full check). A marker of another key is never deleted:
    CacheMismatchError (check_marker)."""
    check_marker(d, key)
    if is_complete(d, key):
        try:
            verify_cache(d)
            return True
        except CacheDamagedError as e:
            print(f"{damaged_message(d, explain(d, e) if explain else e)}; rebuilding it now", flush=True)
    if d.exists():
        shutil.rmtree(d)
    return False


def remove_stale_tmp(root: Path, prefix: str) -> None:
    """Delete temp dirs root/<prefix><pid> left by dead processes (or by this one: a retry in the same kernel)."""
    for tmp in root.glob(f"{glob.escape(prefix)}*"):
        try:
            pid = int(tmp.name[len(prefix):])
        except ValueError:
            continue  # not one of ours
        if not (pid != os.getpid() and _pid_alive(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def temp_build_dir(root: Path, prefix: str):
    """A fresh, empty root/<prefix><pid> to build in, after removing stale ones of dead processes. If the block
    fails, the directory is removed (a half-written build is never left behind) and a full disk is reported as
    OSError(ENOSPC) naming the file (utils.disk_full_errors)."""
    root.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(root, prefix)
    tmp = root / f"{prefix}{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with disk_full_errors(tmp):
            yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already after a successful publish


def publish(tmp: Path, final: Path, key: str) -> None:
    """Record checksums, write the COMPLETE marker last, then rename the temp dir into place (atomic on one
    filesystem)."""
    atomic_write_json(tmp / CHECKSUMS, _checksums(tmp))
    (tmp / "COMPLETE").write_text(key + "\n")
    if final.exists():
        check_marker(final, key)  # another cache moved there during the build
        if is_complete(final, key):  # another process finished first: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
            return
        shutil.rmtree(final)
    os.replace(tmp, final)
