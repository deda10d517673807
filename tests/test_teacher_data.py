"""Teacher loading, corpus, and the top-k teacher cache (normgrow.data.teacher, normgrow.data.teacher_cache, normgrow.data.corpus).

Unit tests use tiny randomly initialised Llama / Qwen3 checkpoints saved to a temp folder with the real SmolLM2
tokenizer; one integration test uses the bundled teacher and corpus. Outputs go to a temp dir; only the one-off GGUF
conversion of the bundled teacher is shared with the real outputs/teacher/models.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from normgrow import paths
from normgrow.data import cache as cache_dirs, corpus as data, teacher, teacher_cache
from normgrow.config import ParamError, TeacherParams, load_profile
from normgrow.utils import atomic_write_json

REAL_MODELS = paths.REPO_ROOT / "outputs" / "teacher" / "models"
WORDS = ("the lord king god man house land day people son water city light hand word heart said went came saw "
         "gave upon unto and of to in that with for not his her their is was be shall will thou thee my").split()


@pytest.fixture(scope="session", autouse=True)
def _shared_models_dir():
    old = teacher.MODELS_DIR
    teacher.MODELS_DIR = REAL_MODELS  # the bundled conversion is expensive: convert once, share it
    yield
    teacher.MODELS_DIR = old


@pytest.fixture(autouse=True)
def out_root(tmp_path, monkeypatch):
    root = tmp_path / "outputs"
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(root))
    monkeypatch.setattr(paths, "OUTPUTS_DIR", root)
    return root


@pytest.fixture(scope="session")
def smol_tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(teacher.resolve_source(TeacherParams(), progress=False))


def _save_tiny(folder: Path, tokenizer, arch: str = "llama", seed: int = 0) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(seed)
    common = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=512,
                  tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    if arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=16, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    with torch.no_grad():  # sharper than the default init, so top-k ordering has no near-ties
        model.get_input_embeddings().weight.normal_(0, 1.0)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory, smol_tokenizer):
    return _save_tiny(tmp_path_factory.mktemp("tiny_llama"), smol_tokenizer, "llama")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory, smol_tokenizer):
    return _save_tiny(tmp_path_factory.mktemp("tiny_qwen3"), smol_tokenizer, "qwen3")


@pytest.fixture(scope="session")
def corpus_files(tmp_path_factory):
    rng = np.random.default_rng(0)
    d = tmp_path_factory.mktemp("corpus")
    with open(d / "docs.jsonl", "w") as f:
        for i in range(80):
            sents = [" ".join(rng.choice(WORDS, size=rng.integers(5, 14))).capitalize() + "."
                     for _ in range(rng.integers(3, 8))]
            f.write(json.dumps({"text": " ".join(sents), "id": i}) + "\n")
    return d


def _profile(model_dir, corpus, name="tiny", **over):
    o = {"teacher.source": str(model_dir), "teacher.dtype": "float32", "teacher.device": "cpu",
         "teacher.batch_size": 4, "data.source": {"files": [str(corpus / "docs.jsonl")], "text_field": "text"},
         "data.seq_len": 32, "data.train_tokens": 512, "data.val_tokens": 128, "data.val_fraction": 0.2,
         "cache.k": 4, "teacher.sanity": "warn"}  # a random tiny teacher is worse than unigram: gate tested apart
    o.update(over)
    return load_profile(name, o)


def _direct(model, tokens: np.ndarray, k: int):
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(np.array(tokens, dtype=np.int64))).logits
    lp = torch.log_softmax(logits.float(), -1)
    top = lp.topk(k, -1)
    return top.indices.numpy(), top.values.numpy(), lp


# ----------------------------------------------------------------------------------------------- the cache
def test_cache_roundtrip_matches_direct_forward(tiny_llama, corpus_files, out_root):
    p = _profile(tiny_llama, corpus_files)
    cache = teacher_cache.ensure_cache(p, progress=False)
    assert cache.dir.parent == out_root / "teacher" and (cache.dir / "COMPLETE").read_text().strip() == cache.key
    m = cache.meta
    for key in ("vocab_size", "k", "seq_len", "bos_id", "pad_id", "special_ids", "teacher", "tokenizer_dir", "data_key"):
        assert key in m
    assert m["k"] == 4 and m["seq_len"] == 32 and m["bos_id"] == 0 and m["vocab_size"] == 49152
    assert cache.tokenizer().convert_ids_to_tokens(m["bos_id"]) == "<|endoftext|>"
    model, _ = teacher.load_teacher(p.teacher)
    for split in (cache.train, cache.val):
        assert isinstance(split.tokens, np.memmap) and isinstance(split.topk_ids, np.memmap)
        assert split.tokens.dtype == np.int32 and split.doc_start.dtype == bool
        assert split.topk_ids.dtype == np.int32 and split.topk_logp.dtype == np.float32
        assert split.topk_ids.shape == split.tokens.shape + (4,) and split.tail_logp.shape == split.tokens.shape
        assert (split.tokens[split.doc_start] == 0).all() and split.doc_start.any()
        rows = slice(0, 3)
        ids, lps, lp = _direct(model, split.tokens[rows], 4)
        np.testing.assert_array_equal(split.topk_ids[rows], ids)
        np.testing.assert_allclose(split.topk_logp[rows], lps, atol=1e-4)
        # tail = log(1 - sum p_topk) = logsumexp over the rest
        rest = lp.scatter(-1, torch.from_numpy(ids).long(), float("-inf")).logsumexp(-1).numpy()
        np.testing.assert_allclose(split.tail_logp[rows], rest, atol=1e-4)
        np.testing.assert_allclose(np.exp(split.tail_logp[rows]) + np.exp(split.topk_logp[rows]).sum(-1), 1.0,
                                   atol=1e-4)
        assert (np.diff(split.topk_logp[rows], axis=-1) <= 0).all()  # descending
    # teacher val_ce = mean over loss_mask positions of -log p(next token)
    t = torch.from_numpy(np.asarray(cache.val.tokens)).long()
    _, _, lp = _direct(model, cache.val.tokens, 4)
    mask = data.loss_mask(torch.from_numpy(np.asarray(cache.val.doc_start)))
    nll = -lp[:, :-1].gather(-1, t[:, 1:, None])[..., 0]
    ce = nll[mask[:, :-1]].mean().item()
    rep = json.loads((cache.dir / "teacher.json").read_text())
    assert rep["val_ce"] == pytest.approx(ce, abs=1e-4) and rep["val_ppl"] == pytest.approx(np.exp(ce), rel=1e-4)
    assert rep["tokens"] == {"train": cache.train.tokens.size, "val": cache.val.tokens.size}
    assert rep["k"] == 4 and rep["seq_len"] == 32
    assert {"load_s", "cache_build_s", "tok_per_s"} <= set(rep["timings"]) and "mean_tail_mass" in rep


def test_sanity_gate_stops_a_teacher_worse_than_unigram(tiny_llama, corpus_files, capsys):
    """A random teacher is worse than the unigram model: under enforce every open names the failed check; the
    cache is built once, and warn opens the same cache (the mode is not part of the key) with a warning."""
    with pytest.raises(teacher_cache.TeacherSanityError, match=r"positions 4\+ the teacher's CE .* not 0.5 nats below"):
        teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files, **{"teacher.sanity": "enforce"}), progress=False)
    with pytest.raises(teacher_cache.TeacherSanityError, match="teacher.sanity: warn"):
        teacher_cache.open_cache(_profile(tiny_llama, corpus_files, **{"teacher.sanity": "enforce"}))
    cache = teacher_cache.open_cache(_profile(tiny_llama, corpus_files))
    assert "WARNING" in capsys.readouterr().out
    pos = cache.report["positions"]["val"]
    assert pos["first"]["positions"] + pos["later"]["positions"] == cache.report["loss_positions"]["val"]
    assert cache.report["sanity"]["failures"] == teacher_cache.sanity_failures(pos)


def test_sanity_checks():
    def positions(first, later):
        return {"first": {"teacher_ce": first[0], "unigram_ce": first[1], "positions": 10},
                "later": {"teacher_ce": later[0], "unigram_ce": later[1], "positions": 90}}
    assert teacher_cache.sanity_failures(positions((7.26, 7.23), (3.85, 7.21))) == []  # the bundled teacher (tiny)
    both = teacher_cache.sanity_failures(positions((13.3, 8.8), (5.7, 5.9)))  # rows without the start token it expects
    assert len(both) == 2 and "0-3" in both[1] and "4+" in both[0]
    assert teacher_cache.sanity_failures(positions((8.0, 7.5), (6.8, 7.2))) == [
        "on positions 4+ the teacher's CE 6.800 is not 0.5 nats below the unigram model's 7.200"]


def test_moved_cache_reads_its_own_tokenizer(tiny_llama, corpus_files, tmp_path):
    cache = teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files), progress=False)
    assert not list(cache.dir.glob(teacher_cache.PROGRESS_FILES))  # the build's progress files do not survive it
    assert not (cache.dir / teacher_cache.PASS_FILE).exists()
    moved = tmp_path / "elsewhere" / cache.key
    shutil.copytree(cache.dir, moved)
    shutil.rmtree(cache.dir / "tokenizer")  # the build-time path in meta.json no longer holds a tokenizer
    try:
        copy = teacher_cache.TeacherCache(moved, cache.key)
        assert copy.meta["tokenizer_dir"] == str(moved / "tokenizer")
        assert copy.tokenizer().convert_ids_to_tokens(copy.meta["bos_id"]) == "<|endoftext|>"
    finally:
        shutil.copytree(moved / "tokenizer", cache.dir / "tokenizer")


def test_loss_mask():
    ds = torch.tensor([[True, False, False, True, False], [False, False, True, False, True]])
    want = torch.tensor([[True, True, False, True, False], [True, False, True, False, False]])
    assert torch.equal(data.loss_mask(ds), want)


def test_reuse_without_loading_teacher(tiny_llama, corpus_files, monkeypatch):
    p = _profile(tiny_llama, corpus_files)
    first = teacher_cache.ensure_cache(p, progress=False)

    def boom(*a, **k):
        raise AssertionError("the teacher must not load when the cache is complete")
    monkeypatch.setattr(teacher, "load_teacher", boom)
    again = teacher_cache.ensure_cache(p, progress=False)
    assert again.key == first.key and again.dir == first.dir
    assert teacher_cache.open_cache(p).key == first.key


@pytest.mark.slow  # trains several runs or starts a process (over 10 s): not in make test-fast
def test_key_invalidation(tiny_llama, corpus_files, smol_tokenizer, tmp_path):
    base = _profile(tiny_llama, corpus_files)
    c0 = teacher_cache.ensure_cache(base, progress=False)
    keys = {c0.key}
    # the key holds the resolved dtype: auto and what it resolves to share a cache; another dtype does not
    auto = _profile(tiny_llama, corpus_files, **{"teacher.dtype": "auto"})
    resolved = teacher.teacher_dtype(auto.teacher)
    c_auto = teacher_cache.ensure_cache(auto, progress=False)
    assert c_auto.meta["dtype"] == resolved and c_auto.report["dtype"] == resolved
    same = teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files, **{"teacher.dtype": resolved}), progress=False)
    assert same.key == c_auto.key
    keys.add(c_auto.key)
    for over in ({"cache.k": 6}, {"data.seq_len": 16}, {"data.split_seed": 1}, {"teacher.dtype": "bfloat16"}):
        if over == {"teacher.dtype": resolved}:  # base is float32; auto resolved to bfloat16 here: already built
            continue
        c = teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files, **over), progress=False)
        assert c.key not in keys, over
        keys.add(c.key)
        assert c.train.topk_ids.shape[-1] == c.meta["k"] and c.train.tokens.shape[1] == c.meta["seq_len"]
    # different weights in a folder (same name, same size): new key, never the stale cache
    other = shutil.copytree(tiny_llama, tmp_path / "teacher_copy")
    c_a = teacher_cache.ensure_cache(_profile(other, corpus_files), progress=False)
    _save_tiny(other, smol_tokenizer, "llama", seed=1)
    p_b = _profile(other, corpus_files)
    with pytest.raises(FileNotFoundError, match="00_teacher.ipynb"):
        teacher_cache.open_cache(p_b)
    c_b = teacher_cache.ensure_cache(p_b, progress=False)
    assert c_b.key != c_a.key and not np.array_equal(c_b.train.topk_logp, c_a.train.topk_logp)
    # different data (a corpus file changed): new data key and cache key
    corpus2 = shutil.copytree(corpus_files, tmp_path / "corpus2")
    c_c = teacher_cache.ensure_cache(_profile(tiny_llama, corpus2), progress=False)
    with open(corpus2 / "docs.jsonl", "a") as f:
        f.write(json.dumps({"text": "A new document about the king and the land."}) + "\n")
    c_d = teacher_cache.ensure_cache(_profile(tiny_llama, corpus2), progress=False)
    assert c_d.meta["data_key"] != c_c.meta["data_key"] and c_d.key != c_c.key
    # different tokenizer: new key
    tok = teacher.load_tokenizer(TeacherParams(source=str(other)))
    tok.add_tokens(["<|newtoken|>"])
    tok.save_pretrained(other)
    assert teacher_cache.resolve_key(p_b)[3] != c_b.key


def test_interrupted_write_is_detected_and_rebuilt(tiny_llama, corpus_files, monkeypatch, out_root):
    p = _profile(tiny_llama, corpus_files)
    real = teacher_cache.topk_forward
    calls = {"n": 0}

    def crash_after_one(*a, **k):
        calls["n"] += 1
        if calls["n"] > 1:
            raise KeyboardInterrupt("simulated crash")
        return real(*a, **k)
    monkeypatch.setattr(teacher_cache, "topk_forward", crash_after_one)
    with pytest.raises(KeyboardInterrupt):
        teacher_cache.ensure_cache(p, progress=False)
    assert not (out_root / "teacher").exists() or not any((out_root / "teacher").iterdir()), \
        "a failed build leaves nothing: not under the final name, and its temp dir is removed"
    with pytest.raises(FileNotFoundError, match="profile tiny"):
        teacher_cache.open_cache(p)
    monkeypatch.setattr(teacher_cache, "topk_forward", real)
    good = teacher_cache.ensure_cache(p, progress=False)
    assert not any(d.name.startswith(".tmp-") for d in (out_root / "teacher").iterdir())
    ref = np.array(good.train.topk_logp)

    # a directory under the final name without a COMPLETE marker (half-written by some other writer), or with a
    # valid marker and damaged contents (a well-formed .npy of another size: only the checksum tells); a marker of
    # another key is test_complete_marker_of_another_key_is_named_and_kept's
    for corrupt in ("missing", "damaged"):
        marker = good.dir / "COMPLETE"
        if corrupt == "missing":
            marker.unlink()
        np.save(good.dir / "train" / "topk_logp.npy", np.zeros((1,), np.float32))  # garbage contents
        if corrupt == "damaged":
            with pytest.raises(cache_dirs.CacheDamagedError, match=r"train/topk_logp.npy: .* recorded at build time.*"
                                                             r"Delete it \(rm -rf"):
                teacher_cache.open_cache(p)
        else:
            with pytest.raises(FileNotFoundError, match="incomplete"):
                teacher_cache.open_cache(p)
        good = teacher_cache.ensure_cache(p, progress=False)
        np.testing.assert_array_equal(np.array(good.train.topk_logp), ref)


def _rewrite_checksums(d: Path) -> None:
    """What someone who alters a cache and covers it up does: checksums.json made to match the altered files."""
    atomic_write_json(d / cache_dirs.CHECKSUMS, cache_dirs._checksums(d))


def test_foreign_cache_under_this_key_is_named(tiny_llama, corpus_files):
    """A cache built with another cache.k, copied into this key's directory with COMPLETE (then meta.json's key,
    then its k, then teacher.json's key and k) rewritten to this key, is named by the first field that gives it away,
    down to the arrays' shapes, at every open; the builder raises the same and deletes nothing."""
    p = _profile(tiny_llama, corpus_files)
    mine = teacher_cache.ensure_cache(p, progress=False)
    other = teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files, **{"cache.k": 6}), progress=False)
    shutil.rmtree(mine.dir)
    shutil.copytree(other.dir, mine.dir)
    (mine.dir / "COMPLETE").write_text(mine.key + "\n")
    meta = json.loads((mine.dir / "meta.json").read_text())
    for field, value, named in (("key", None, rf"meta.json: key is '{other.key}', expected '{mine.key}'"),
                                ("key", mine.key, r"meta.json: k is 6, expected 4"),
                                ("k", 4, rf"teacher.json: key is '{other.key}', expected '{mine.key}'")):
        if value is not None:
            meta[field] = value
            (mine.dir / "meta.json").write_text(json.dumps(meta))
            _rewrite_checksums(mine.dir)
        for opening in (lambda: teacher_cache.open_cache(p), lambda: teacher_cache.ensure_cache(p, progress=False)):
            with pytest.raises(cache_dirs.CacheMismatchError, match=named + r".*Nothing was deleted"):
                opening()
    report = json.loads((mine.dir / "teacher.json").read_text())
    (mine.dir / "teacher.json").write_text(json.dumps(report | {"key": mine.key, "k": 4}))
    _rewrite_checksums(mine.dir)
    with pytest.raises(cache_dirs.CacheMismatchError, match=r"train/topk_ids.npy: the array is int32\[\d+, 32, 6\], "
                                                      r"expected int32\[\d+, 32, 4\]"):
        teacher_cache.open_cache(p)
    assert (mine.dir / "COMPLETE").exists()


def test_altered_arrays_with_rewritten_checksums_are_named(tiny_llama, corpus_files):
    """Arrays zeroed (or a baseline edited) with checksums.json rewritten to match: the distribution check, the
    target check and the recomputed teacher baseline each name the file; a correct cache passes all of them."""
    p = _profile(tiny_llama, corpus_files)
    cache = teacher_cache.ensure_cache(p, progress=False)
    kept = {f: f.read_bytes() for f in cache.dir.rglob("*") if f.is_file()}
    for file, named in (("val/topk_logp.npy", r"val/topk_logp.npy: the top-k probabilities plus the tail mass "
                                              r"\(tail_logp.npy\) at row 0, position 0 is 4.000000, expected 1"),
                        ("train/tail_logp.npy", r"train/topk_logp.npy: the top-k probabilities plus the tail mass"),
                        ("val/target_logp.npy", r"val/target_logp.npy: the next token's log-prob at row 0"),
                        ("teacher.json", r"teacher.json: val_ce \(the teacher baseline\) is 0.0, expected [\d.]+, "
                                         r"recomputed from val/target_logp.npy")):
        f = cache.dir / file
        if f.suffix == ".npy":
            np.save(f, np.zeros_like(np.load(f)))
        else:
            f.write_text(json.dumps(json.loads(f.read_text()) | {"val_ce": 0.0}))
        _rewrite_checksums(cache.dir)
        with pytest.raises(cache_dirs.CacheMismatchError, match=named):
            teacher_cache.open_cache(p)
        for kept_file, content in kept.items():
            kept_file.write_bytes(content)
    assert teacher_cache.open_cache(p).report["val_ce"] > 0


def test_a_cache_without_a_matching_record_is_checked_in_full_then_refused_or_rebuilt(tiny_llama, corpus_files,
                                                                                     capsys, monkeypatch):
    """A cache whose checksums.json is missing is checked on every row (not the sample): a damaged row outside the
    sample is named with its file and row; open_cache refuses it, ensure_cache rebuilds it, and neither ever writes
    a record from the files found (an intact cache without its record is refused too)."""
    p = _profile(tiny_llama, corpus_files)
    cache = teacher_cache.ensure_cache(p, progress=False)
    monkeypatch.setattr(teacher_cache, "SAMPLE_ROWS", 2)  # the sample reads the first and the last row, not row 1
    (cache.dir / cache_dirs.CHECKSUMS).unlink()
    with pytest.raises(cache_dirs.CacheDamagedError, match=r"checksums.json: missing.*every row of every array "
                                                           r"passes the content checks.*Delete it"):
        teacher_cache.open_cache(p)
    assert not (cache.dir / cache_dirs.CHECKSUMS).exists()
    logp = np.load(cache.dir / "train" / "topk_logp.npy")
    logp[1, 3] = np.nan
    np.save(cache.dir / "train" / "topk_logp.npy", logp)
    named = (r"checksums.json: missing.*every row checked: .*train/topk_logp.npy: the top-k probabilities plus the "
             r"tail mass \(tail_logp.npy\) at row 1, position 3 is nan")
    with pytest.raises(cache_dirs.CacheDamagedError, match=named):
        teacher_cache.open_cache(p)
    assert not (cache.dir / cache_dirs.CHECKSUMS).exists()
    rebuilt = teacher_cache.ensure_cache(p, progress=False)
    assert re.search(named + r".*rebuilding it now", capsys.readouterr().out)
    assert np.isfinite(np.load(rebuilt.dir / "train" / "topk_logp.npy")).all()
    assert (rebuilt.dir / cache_dirs.CHECKSUMS).exists()  # written by the rebuild's publish


def test_complete_marker_of_another_key_is_named_and_kept(tiny_llama, corpus_files):
    """A directory whose COMPLETE names another key is another cache: open and build both name the two keys and
    delete nothing (it used to be called an interrupted build, deleted and rebuilt)."""
    p = _profile(tiny_llama, corpus_files)
    cache = teacher_cache.ensure_cache(p, progress=False)
    (cache.dir / "COMPLETE").write_text("0123456789abcdef\n")
    named = rf"COMPLETE names the cache key 0123456789abcdef, but .* of key {cache.key} belongs.*Nothing was deleted"
    for opening in (lambda: teacher_cache.open_cache(p), lambda: teacher_cache.ensure_cache(p, progress=False)):
        with pytest.raises(cache_dirs.CacheMismatchError, match=named):
            opening()
    assert (cache.dir / "train" / "topk_logp.npy").exists()


# ----------------------------------------------------------------------------------------------- corpus
def test_bundled_split_is_by_document_and_deterministic(smol_tokenizer):
    params = load_profile("tiny").data
    ds = data.ensure_data(params, smol_tokenizer, progress=False)
    tr, va = set(ds.train.doc_ids), set(ds.val.doc_ids)
    assert tr and va and not (tr & va)
    assert all(not data.is_val_doc(d, params) for d in tr) and all(data.is_val_doc(d, params) for d in va)
    assert {d.split("/")[0] for d in tr} == {"kjv", "shakespeare"}  # both corpora are mixed in
    assert ds.train.tokens.shape == (params.train_tokens // params.seq_len, params.seq_len)
    assert ds.val.tokens.shape == (params.val_tokens // params.seq_len, params.seq_len)
    for split in (ds.train, ds.val):  # every row begins with the start token; S appears only where flagged
        tokens, starts = np.asarray(split.tokens), np.asarray(split.doc_start)
        assert (tokens[:, 0] == 0).all() and starts[:, 0].all()
        assert (tokens[starts] == 0).all() and not (tokens[~starts] == 0).any()
    # deterministic: a fresh build gives the same tokens
    packed = data._tokenize_and_pack(params, data.normalize_source("bundled"), smol_tokenizer, 0, False)
    np.testing.assert_array_equal(packed["train"][0], ds.train.tokens)
    np.testing.assert_array_equal(packed["val"][1], ds.val.doc_start)
    text = smol_tokenizer.decode(np.asarray(ds.val.tokens[0]))
    assert "Gutenberg" not in text and "\r" not in text


def test_pack_rows_starts_every_row_with_the_start_token():
    S = 0
    docs = [np.array([S, 1, 2, 3, 4, 5, 6, 7]), np.array([S, 8, 9]), np.array([S, 10, 11, 12, 13, 14])]
    tokens, starts = data.pack_rows(docs, 4, S)
    # doc 1 fills row 0 with its own S, rows 1-2 continue it behind a prepended S; doc 2 starts inside row 2
    np.testing.assert_array_equal(tokens, [[S, 1, 2, 3], [S, 4, 5, 6], [S, 7, S, 8], [S, 9, S, 10],
                                           [S, 11, 12, 13]])
    np.testing.assert_array_equal(starts, tokens == S)
    assert starts[:, 0].all()
    # no token of a document is lost or repeated (the last incomplete row, [S, 14], is dropped)
    body = tokens[~starts]
    np.testing.assert_array_equal(body, np.arange(1, 14))
    mask = data.loss_mask_np(starts)  # an S is never a target
    assert not (np.roll(tokens, -1, axis=1)[mask] == S).any()


def test_row_count_counts_the_rows_pack_rows_cuts():
    rng = np.random.default_rng(0)
    for seq_len in (2, 4, 7, 32):
        lengths = rng.integers(1, 3 * seq_len, size=40)
        counter = data.RowCount(seq_len)
        for i, n in enumerate(lengths):
            counter.add(int(n))
            docs = [np.concatenate([[0], np.ones(m - 1, np.int32)]) for m in lengths[:i + 1]]
            assert counter.rows == len(data.pack_rows(docs, seq_len, 0)[0]), (seq_len, i)


def test_long_documents_are_cut_into_sections_at_paragraphs():
    paras = [f"paragraph {i} " + "word " * 40 for i in range(10)]  # ~215 characters each
    text = "\n\n".join(paras)
    parts = data.sections(text, 500)
    assert len(parts) == 5 and "\n\n".join(parts) == text
    assert all(p.startswith("paragraph") for p in parts) and max(map(len, parts)) <= 500
    assert data.sections(text, 0) == [text] and data.sections("short", 500) == ["short"]


def test_section_ids_and_every_source_sectioned(tmp_path):
    (tmp_path / "book.txt").write_text("\n\n".join(f"Para {i}. " + "text " * 30 for i in range(20)))
    (tmp_path / "note.txt").write_text("A short note about Project Gutenberg, kept whole.")
    spec = data.normalize_source({"files": [str(tmp_path / "*.txt")]})
    docs = dict(data.iter_documents(spec, 0, max_doc_chars=1000))
    book = sorted(d for d in docs if d.startswith("file:book.txt/"))
    assert len(book) >= 3 and "file:note.txt" in docs
    assert docs["file:note.txt"] == "A short note about Project Gutenberg, kept whole."


def test_gutenberg_header_stripped():
    raw = ("The Project Gutenberg EBook of X\n\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n\nBody text.\n\n"
           "*** END OF THIS PROJECT GUTENBERG EBOOK X ***\nLicense...")
    assert data.clean_text(data.strip_gutenberg(raw)) == "Body text."
    plain = "A text about Project Gutenberg.\n\nEnd of Project Gutenberg's history, a chapter title."
    assert data.strip_gutenberg(plain) == plain  # no START marker: nothing is cut


# ----------------------------------------------------------------------------------------------- errors before work
def test_clear_errors_before_heavy_work(tiny_llama, corpus_files, monkeypatch):
    with pytest.raises(ParamError, match=r"profile='nope'.*allowed values: .*tiny"):
        load_profile("nope")
    with pytest.raises(ParamError, match=r"cache.k=0 must be > 0"):
        load_profile("tiny", {"cache.k": 0})
    with pytest.raises(ParamError, match=r"cache.k=-3 must be > 0"):
        load_profile("tiny", {"cache.k": -3})

    def boom(*a, **k):
        raise AssertionError("heavy work started before validation")
    monkeypatch.setattr(teacher, "load_teacher", boom)
    monkeypatch.setattr(teacher, "load_tokenizer", boom)
    monkeypatch.setattr(teacher, "convert_gguf", boom)
    for bad, msg in (("wikitext", r"data.source: 'wikitext' is not a known source.*allowed forms"),
                     ({"files": ["/no/such/file.jsonl"]}, r"data.source: files: .* matches no file"),
                     ({"hub": "x/y", "splitt": "train"}, r"data.source: unknown key 'splitt'"),
                     ({"path": "x"}, r"data.source: .*neither hub nor files")):
        with pytest.raises(ParamError, match=msg):
            teacher_cache.ensure_cache(load_profile("tiny", {"data.source": bad}), progress=False)
    with pytest.raises(ParamError, match=r"teacher.source='\./no_such_dir'.*allowed values"):
        teacher_cache.ensure_cache(load_profile("tiny", {"teacher.source": "./no_such_dir"}), progress=False)


def test_a_bad_corpus_is_refused_naming_its_file_line_and_key(tiny_llama, corpus_files, tmp_path, monkeypatch):
    """Each refused before the teacher loads, with the file, the line and the key: before, an empty .jsonl ended in
    StopIteration, a broken line in datasets' DatasetGenerationError, a record without the text field or with a
    number as text was dropped or converted without a word, and a corpus short of data.val_tokens was a warning."""
    def boom(*a, **k):
        raise AssertionError("the teacher loaded before the corpus was checked")
    monkeypatch.setattr(teacher, "load_teacher", boom)
    good = [json.dumps({"text": "Some words in a document."})] * 3
    cases = {"empty.jsonl": ([], r"empty\.jsonl holds no records"),
             "broken.jsonl": ([*good, '{"text": "cut off', *good], r"broken\.jsonl: line 4 is not JSON"),
             "nofield.jsonl": ([*good, json.dumps({"body": "x"})], r"text_field='text': .*nofield\.jsonl:4 has no "
                               r"such field \(its fields: body\)"),
             "number.jsonl": ([*good, json.dumps({"text": 7})], r"text_field='text': .*number\.jsonl:4 holds 7, not a "
                              r"string"),
             "null.jsonl": ([*good, json.dumps({"text": None})], r"null\.jsonl:4 holds None, not a string"),
             "list.json": (['{"text": "a"}'], r"list\.json holds a dict, not a list of records"),
             "lines.json": ([*good], r"lines\.json: line 2 is not JSON .*name it \.jsonl")}
    for name, (lines, msg) in cases.items():
        (tmp_path / name).write_text("".join(line + "\n" for line in lines))
        with pytest.raises(ParamError, match=msg):
            teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files, **{"data.source": {
                "files": [str(tmp_path / name)]}}), progress=False)
    with pytest.raises(ParamError, match=r"data.val_tokens=100000: the corpus gives only \d+ val tokens"):
        teacher_cache.ensure_cache(_profile(tiny_llama, corpus_files, **{"data.val_tokens": 100_000}), progress=False)


# ----------------------------------------------------------------------------------------------- paper path
def test_paper_profile_loads_a_local_qwen3(tiny_qwen3, corpus_files):
    """What paper users run with Qwen/Qwen3-8B, pointed offline at a tiny random Qwen3 checkpoint."""
    p = _profile(tiny_qwen3, corpus_files, name="paper", **{"teacher.dtype": "bfloat16", "data.seq_len": 32})
    assert load_profile("paper").teacher.source == "Qwen/Qwen3-8B" and p.teacher.batch_size == 4
    model, tok = teacher.load_teacher(p.teacher)
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.dtype == torch.bfloat16 and not model.training
    assert next(model.parameters()).device.type == "cpu"
    cache = teacher_cache.ensure_cache(p, progress=False)
    assert cache.meta["teacher_class"] == "Qwen3ForCausalLM" and cache.meta["dtype"] == "bfloat16"
    ids, lps, _ = _direct(model, cache.val.tokens[:4], p.cache.k)  # the cache pass batch (batch_size=4)
    np.testing.assert_array_equal(cache.val.topk_ids[:4], ids)
    np.testing.assert_allclose(cache.val.topk_logp[:4], lps, atol=2e-2)  # bf16 tolerance


# ----------------------------------------------------------------------------------------------- bundled teacher
@pytest.mark.integration
def test_bundled_teacher_and_corpus(out_root):
    p = load_profile("tiny", {"data.train_tokens": 256, "data.val_tokens": 256, "teacher.batch_size": 4,
                              "teacher.device": "cpu"})
    cache = teacher_cache.ensure_cache(p, progress=False)
    assert cache.meta["teacher"] == "bundled" and cache.meta["vocab_size"] == 49152 and cache.meta["bos_id"] == 0
    rep = cache.report
    assert 1.5 < rep["val_ce"] < 7.0 and rep["tokens"] == {"train": 256, "val": 256}
    assert 0.0 < rep["mean_tail_mass"]["val"] < 1.0
    model, tok = teacher.load_teacher(p.teacher)
    # auto: bf16 where the CPU computes it natively, float32 on an AVX2-only CPU
    assert type(model).__name__ == "LlamaForCausalLM" and model.dtype == getattr(torch, teacher.teacher_dtype(p.teacher))
    ids, lps, _ = _direct(model, cache.val.tokens[:4], p.cache.k)
    same = (cache.val.topk_ids[:4] == ids).mean()
    assert same > 0.99, same  # bf16: exact up to rare near-ties
    np.testing.assert_allclose(cache.val.topk_logp[:4], lps, atol=5e-2)
    gens = teacher.generate(model, tok, ["In the beginning God created"], max_new_tokens=4)
    assert isinstance(gens[0], str) and gens[0]


def test_a_cache_folder_holding_only_its_committed_record_is_named_as_such(tiny_llama, corpus_files, outputs):
    """A clone has outputs/teacher/<key>/teacher.json (the committed record) and no cache: opening it says the cache
    was not built on this machine, not that a build was interrupted; an empty folder is still an interrupted build."""
    profile = _profile(tiny_llama, corpus_files, **{"data.train_tokens": 384})
    key = teacher_cache.resolve_key(profile)[3]
    folder = teacher.teacher_root() / key
    folder.mkdir(parents=True)
    (folder / "teacher.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"is not built on this machine \(its folder holds only teacher.json"):
        teacher_cache.open_cache(profile)
    (folder / "teacher.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"is incomplete \(interrupted build\)"):
        teacher_cache.open_cache(profile)


def test_the_pass_s_matmul_peak_is_sized_to_its_dtype_s_speed(monkeypatch):
    """The pass's peak sample is sized so that a product takes about 0.1 s (utils.peak_size): a dtype the CPU
    emulates (bf16 without AVX512-BF16 or AMX, ~60x slower) gets a 256-cube product instead of the 2,048-cube one that
    took minutes (the paper-profile test's bf16 pass spent 575 s in it on an AVX2 CPU)."""
    from normgrow import utils
    clock = iter([0.0, 0.1])  # one 256-cube product took 0.1 s: as slow as emulated bf16
    monkeypatch.setattr(utils.time, "perf_counter", lambda: next(clock))
    assert utils.peak_size(torch.float32) == 256
    clock = iter([0.0, 0.1 / 1000])  # 1000x faster: 10 x 256 -> capped at 2,048
    assert utils.peak_size(torch.float32) == 2048
    sizes = []
    monkeypatch.setattr(utils, "peak_size", lambda dtype: 512)
    monkeypatch.setattr(utils, "matmul_peak_sampler", lambda dtype, n: sizes.append(n) or (lambda: 1e9))
    out = teacher_cache._peak_fraction(1000.0, 2e6, "bfloat16", "cpu", 2)
    assert sizes == [512] and out["matmul_peak_flop_s"] == 2e9 and out["peak_fraction"] == pytest.approx(1.0)
