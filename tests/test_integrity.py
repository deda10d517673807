"""File integrity of the caches (data.py, teacher.py, utils.py): checksums, damage, temp dirs, full disks."""
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from normgrow import config
from normgrow.data import cache as cache_dirs, teacher, teacher_cache
from normgrow.data.cache import CacheDamagedError, publish, reuse_or_clear, temp_build_dir, verify_cache
from normgrow.utils import atomic_write_json, disk_full_errors

KEY = "k0"


def build(root, key=KEY):
    """A small cache directory published the way ensure_data / ensure_cache publish theirs."""
    with temp_build_dir(root, f".tmp-{key}-") as tmp:
        (tmp / "train").mkdir()
        np.save(tmp / "train" / "tokens.npy", np.arange(600, dtype=np.int32).reshape(20, 30))
        np.save(tmp / "train" / "topk_logp.npy", np.linspace(-9, 0, 20 * 30 * 4, dtype=np.float32).reshape(20, 30, 4))
        atomic_write_json(tmp / "meta.json", {"key": key})
        publish(tmp, root / key, key)
    return root / key


def test_publish_records_size_and_sha256(tmp_path):
    d = build(tmp_path)
    sums = json.loads((d / cache_dirs.CHECKSUMS).read_text())
    assert sorted(sums) == ["meta.json", "train/tokens.npy", "train/topk_logp.npy"]
    f = d / "train" / "topk_logp.npy"
    assert sums["train/topk_logp.npy"] == {"bytes": f.stat().st_size, "sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
    assert f.stat().st_size == 128 + 20 * 30 * 4 * 4  # npy header + float32 payload
    assert (d / "COMPLETE").read_text() == KEY + "\n" and not list(tmp_path.glob(".tmp-*"))
    verify_cache(d)


def truncate(f, n=100):
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - n)


def garble(f):
    """Same size, different bytes (past the header)."""
    b = bytearray(f.read_bytes())
    b[-1] ^= 0xFF
    f.write_bytes(bytes(b))


def test_truncated_and_garbled_arrays_are_named(tmp_path):
    d = build(tmp_path)
    f = d / "train" / "topk_logp.npy"
    size = f.stat().st_size
    truncate(f)
    with pytest.raises(CacheDamagedError, match=rf"topk_logp.npy: {size - 100} bytes, its header needs {size}"):
        verify_cache(d)
    d = build(tmp_path / "b")
    garble(d / "train" / "tokens.npy")
    with pytest.raises(CacheDamagedError, match=r"tokens.npy: content differs from the sha256 recorded at build"):
        verify_cache(d)
    (d / "meta.json").unlink()
    with pytest.raises(CacheDamagedError, match=r"meta.json: missing"):
        verify_cache(d)


def test_a_cache_without_its_checksum_record_is_damaged_and_never_re_blessed(tmp_path, capsys):
    """checksums.json is written by publish alone: a cache without it (older, or the record deleted) is damaged at
    every open and the builders rebuild it; no record is ever written from the files found."""
    d = build(tmp_path)
    (d / cache_dirs.CHECKSUMS).unlink()
    garble(d / "train" / "tokens.npy")  # undetectable without a record: so nothing may record these files
    with pytest.raises(CacheDamagedError, match=r"checksums.json: missing, so the files cannot be proven"):
        verify_cache(d)
    assert not (d / cache_dirs.CHECKSUMS).exists()
    assert not reuse_or_clear(d, KEY) and not d.exists()  # rebuilt, not re-blessed
    assert "checksums.json: missing" in capsys.readouterr().out
    d = build(tmp_path)
    truncate(d / "train" / "topk_logp.npy")
    (d / cache_dirs.CHECKSUMS).unlink()
    with pytest.raises(CacheDamagedError, match="its header needs"):
        verify_cache(d)  # truncation is named from the .npy header


def test_builders_rebuild_a_damaged_cache(tmp_path, capsys):
    d = build(tmp_path)
    assert reuse_or_clear(d, KEY)
    garble(d / "train" / "topk_logp.npy")
    assert not reuse_or_clear(d, KEY) and not d.exists()
    assert f"cache {d} is damaged: {d / 'train' / 'topk_logp.npy'}: content differs" in capsys.readouterr().out


@pytest.mark.integration  # the test run's reduced study (conftest.finished_study): not in make test-fast
def test_real_tiny_cache_opens_without_side_effects(tmp_path, monkeypatch, finished_study):
    """The tiny profile's real cache (the repository's, or the one the test run's reduced study built) opens under
    its key; deriving the key on a tree without the converted teacher converts nothing (the tokenizer is read from
    the GGUF)."""
    prof = config.load_profile("tiny")
    real = finished_study[0] / "teacher"
    key = teacher_cache.resolve_key(prof)[3]  # 0550ade468b3792a where the teacher pass runs in float32 (no native bf16)
    assert cache_dirs.is_complete(real / key, key), f"no complete tiny cache at {real / key}"
    shutil.copytree(real / key, tmp_path / "outputs" / "teacher" / key)
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setattr(teacher, "MODELS_DIR", tmp_path / "models")  # a fresh tree: nothing converted
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    cache = teacher_cache.open_cache(prof)
    assert cache.key == key and cache.val.tokens.shape[1] == 64
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written
    truncate(cache.dir / "val" / "tail_logp.npy")
    with pytest.raises(CacheDamagedError, match=r"val/tail_logp.npy: .*Delete it \(rm -rf"):
        teacher_cache.open_cache(prof)


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_temp_dirs_of_dead_processes_are_removed(tmp_path):
    """An interrupted conversion (models/<name>.tmp-<pid>) or build is cleaned up at the next one; a live
    process's temp dir and foreign names are left alone."""
    prefix = f"{teacher.BUNDLED_NAME}.tmp-"
    stale, live, foreign = (tmp_path / f"{prefix}{dead_pid()}", tmp_path / f"{prefix}{os.getppid()}",
                            tmp_path / f"{prefix}notapid")
    for d in (stale, live, foreign):
        d.mkdir()
    with temp_build_dir(tmp_path, prefix) as tmp:
        assert tmp.name == f"{prefix}{os.getpid()}"
        (tmp / "x").write_text("y")
        os.replace(tmp, tmp_path / "done")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["done", live.name, foreign.name])
    with pytest.raises(ValueError, match="boom"):
        with temp_build_dir(tmp_path, prefix) as tmp:
            (tmp / "partial").write_text("half")
            raise ValueError("boom")
    assert not tmp.exists()  # a failed build removes its own temp dir


def test_disk_full_names_the_file(tmp_path, monkeypatch):
    target = tmp_path / "sub" / "meta.json"
    real_write = type(target).write_text

    def full(self, *a, **k):
        real_write(self, "{par")  # a partial write first
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(type(target), "write_text", full)
    with pytest.raises(OSError, match=f"no space left on device while writing {target}; free space") as e:
        atomic_write_json(target, {"a": 1})
    assert e.value.errno == errno.ENOSPC and list(target.parent.iterdir()) == []  # no temp file left behind
    monkeypatch.undo()
    with pytest.raises(OSError, match=f"no space left on device while writing {tmp_path / 'x.npy'}"):
        with disk_full_errors(tmp_path):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x.npy"))
    with pytest.raises(PermissionError):  # other errors pass unchanged
        with disk_full_errors(tmp_path):
            raise PermissionError(errno.EACCES, "denied")


def test_cache_build_disk_full(tmp_path, monkeypatch):
    """The teacher pass reserves its memory-mapped arrays' blocks first: a full disk is an OSError naming the array
    (not a SIGBUS mid-pass), and the failed build leaves no temp dir."""
    if not hasattr(os, "posix_fallocate"):
        pytest.skip("no posix_fallocate on this system")

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", full)
    tokens = np.ones((4, 8), np.int32)
    with pytest.raises(OSError, match=r"no space left on device while writing .*train/topk_ids.npy"):
        with temp_build_dir(tmp_path, ".tmp-k-") as tmp:
            teacher_cache._allocate_split(tokens, tokens.astype(bool), tmp / "train", 2)
    assert list(tmp_path.iterdir()) == []
