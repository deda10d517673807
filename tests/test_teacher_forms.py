"""The forms of teacher.source (bundled, transformers folder, .gguf file, folder holding one .gguf, hub id) and the
one path rule of profiles (paths.resolve_profile_path): tiny teachers built by the test (tests/tiny_teachers.py),
outputs in a temp dir."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from normgrow import paths
from normgrow.data import corpus as data, teacher, teacher_cache
from normgrow.config import ParamError, TeacherParams, load_profile
from tiny_teachers import corpus_texts, save_folder_teacher, tiny_llama, train_tokenizer, write_corpus, write_gguf

pytestmark = pytest.mark.slow  # processes, subprocesses or model conversions: not in make test-fast


@pytest.fixture(autouse=True)
def out_root(tmp_path, monkeypatch):
    root = tmp_path / "outputs"
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(root))
    monkeypatch.setattr(teacher, "MODELS_DIR", None)  # conversions go under the temp outputs
    return root


@pytest.fixture(scope="module")
def texts():
    return corpus_texts()


def _profile(source, corpus, **over):
    o = {"teacher.source": str(source), "teacher.dtype": "float32", "teacher.sanity": "warn", "teacher.device": "cpu", "teacher.batch_size": 4,
         "data.source": {"files": [f"{corpus}/*.txt"]}, "data.seq_len": 32, "data.train_tokens": 512,
         "data.val_tokens": 128, "data.val_fraction": 0.2, "cache.k": 4}
    return load_profile("tiny", o | over)


# ----------------------------------------------------------------------------------------------- GGUF teachers
def test_gguf_file_and_folder_convert_once_to_the_same_model(tmp_path, texts, capsys):
    tok = train_tokenizer(texts)
    written = tiny_llama(len(tok))
    folder = tmp_path / "download"
    folder.mkdir()
    gguf = write_gguf(folder / "tiny-llama.gguf", written, tok)  # the folder holds the .gguf and nothing else
    corpus = write_corpus(tmp_path / "corpus", texts)
    as_file, as_folder = _profile(gguf, corpus), _profile(folder, corpus)
    assert teacher_cache.validate(as_file) == teacher_cache.validate(as_folder) == "gguf"
    g, out = teacher.gguf_source(str(gguf))
    assert teacher.gguf_source(str(folder)) == (g, out) and g == gguf.resolve()
    assert out.parent == teacher.models_dir() and out.name.startswith("tiny-llama-")

    # the key is derived without converting (tokenizer read from the GGUF), and is the same after the conversion
    key = teacher_cache.resolve_key(as_file)[3]
    assert not out.exists() and teacher_cache.resolve_key(as_folder)[3] == key

    from transformers import AutoModelForCausalLM
    model, _ = teacher.load_teacher(as_file.teacher)
    assert "converting teacher tiny-llama.gguf" in capsys.readouterr().out
    assert json.loads((out / "CONVERTED").read_text()) == {"gguf": "tiny-llama.gguf", "size": gguf.stat().st_size,
                                                          "format": 2}
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    direct = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=gguf.name, dtype=torch.float32).eval()
    ids = torch.randint(3, len(tok), (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        converted, from_gguf, original = model(ids).logits, direct(ids).logits, written(ids).logits
    torch.testing.assert_close(converted, from_gguf, atol=1e-6, rtol=0)
    torch.testing.assert_close(converted, original, atol=1e-5, rtol=0)  # float32 tensors: the file is exact

    stamp = (out / "CONVERTED").stat().st_mtime_ns
    again, tok_again = teacher.load_teacher(as_folder.teacher)  # the second use reads the converted folder
    assert "converting" not in capsys.readouterr().out and (out / "CONVERTED").stat().st_mtime_ns == stamp
    assert teacher_cache.resolve_key(as_folder)[3] == key
    # the GGUF's own document start: its BOS (<s>, id 1), not the <|endoftext|> transformers' GPT-2 tokenizer class
    # adds beyond the model's vocabulary (id 320 of a 320-token model)
    assert tok_again.convert_tokens_to_ids("<|endoftext|>") == len(tok)
    cache = teacher_cache.ensure_cache(as_folder, progress=False)
    assert cache.key == key and cache.meta["bos_id"] == 1 and cache.meta["vocab_size"] == len(tok)
    assert cache.meta["teacher_identity"]["source"] == str(gguf.resolve())
    rows = torch.from_numpy(np.asarray(cache.val.tokens[:2], dtype=np.int64))
    with torch.no_grad():
        top = torch.log_softmax(again(rows).logits, -1).topk(4, -1)
    np.testing.assert_array_equal(cache.val.topk_ids[:2], top.indices.numpy())


def test_bundled_conversion_folder_and_stamp_unchanged(tmp_path, monkeypatch):
    """A bundled conversion made before GGUF files in general were accepted is found where it always was."""
    monkeypatch.setattr(teacher, "MODELS_DIR", tmp_path / "models")
    g, out = teacher.gguf_source("bundled")
    assert out == tmp_path / "models" / "smollm2-135m-instruct" and g.name == teacher.BUNDLED_GGUF
    out.mkdir(parents=True)
    (out / "CONVERTED").write_text(json.dumps({"gguf": g.name, "size": g.stat().st_size, "format": 2}))
    assert teacher.converted(g, out) == out
    assert teacher.resolve_source(TeacherParams(), progress=False) == str(out)  # reused: nothing converts
    assert teacher.teacher_identity(TeacherParams(dtype="float32")) == {
        "source": "bundled", "dtype": "float32", "gguf": g.name, "size": g.stat().st_size}


# ----------------------------------------------------------------------------------------------- validation
def test_each_form_is_named_and_an_unusable_folder_says_what_it_lacks(tmp_path, texts):
    complete = save_folder_teacher(tmp_path / "complete", texts)
    assert teacher.check_teacher_source(str(complete)) == "folder"
    assert teacher.check_teacher_source("bundled") == "bundled"
    assert teacher.check_teacher_source("Qwen/Qwen3-8B") == "hub"
    # the folder form's identity (cache key) is what it always was: resolved path, config hash, weight files
    ident = teacher.teacher_identity(TeacherParams(source=str(complete), dtype="float32"))
    weights = complete / "model.safetensors"
    assert ident == {"source": str(complete.resolve()), "dtype": "float32",
                     "config": teacher.stable_hash((complete / "config.json").read_text(), 16),
                     "weights": [["model.safetensors", weights.stat().st_size, weights.stat().st_mtime_ns]]}

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ParamError, match=r"folder .*empty is not a usable teacher: no config.json, no weights "
                                         r"\(\*.safetensors / \*.bin\), no tokenizer files \(tokenizer.json, "
                                         r"tokenizer.model, vocab.json, vocab.txt\)"):
        teacher.check_teacher_source(str(empty))
    (empty / "config.json").write_text((complete / "config.json").read_text())
    (empty / "model.safetensors").write_bytes(weights.read_bytes())
    with pytest.raises(ParamError, match=r"not a usable teacher: no tokenizer files \(") as e:
        teacher.check_teacher_source(str(empty))
    assert "config.json," not in str(e.value).split("usable teacher:")[1].split(".")[0]
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (two / name).write_bytes(b"GGUF")
    with pytest.raises(ParamError, match=r"holds 2 .gguf files \(a.gguf, b.gguf\) .*set teacher.source to one"):
        teacher.check_teacher_source(str(two))
    with pytest.raises(ParamError, match=r"is the file .*config.json, which is not a .gguf file"):
        teacher.check_teacher_source(str(complete / "config.json"))
    with pytest.raises(ParamError, match=r"teacher.source='\./models/none' is neither .* \(.*models/none does not "
                                         r"exist\)"):
        teacher.check_teacher_source("./models/none")


def test_broken_folder_fails_at_load_naming_what_was_tried(tmp_path, texts):
    broken = save_folder_teacher(tmp_path / "broken", texts)
    (broken / "config.json").write_text("{not json")
    with pytest.raises(teacher.TeacherLoadError, match=r"(?s)tried local folder .*broken.*What to do"):
        teacher.load_teacher(TeacherParams(source=str(broken), device="cpu"))


def test_generate_passes_a_pad_id_of_zero(tmp_path, texts):
    tok = train_tokenizer(texts)
    assert tok.pad_token_id == 0 and tok.bos_token_id == 1
    model = tiny_llama(len(tok))
    seen = {}
    real = model.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return real(**kwargs)
    model.generate = spy
    out = teacher.generate(model, tok, ["the king said"], max_new_tokens=3)
    assert seen["pad_token_id"] == 0 and seen["input_ids"][0, 0] == 1 and isinstance(out[0], str)


# ----------------------------------------------------------------------------------------------- one path rule
@pytest.fixture
def repo(tmp_path, monkeypatch, texts):
    """A repository root holding a teacher folder (models/tiny), a corpus (corpus/*.txt) and notebooks/."""
    root = tmp_path / "repo"
    save_folder_teacher(root / "models" / "tiny", texts)
    write_corpus(root / "corpus", texts)
    (root / "notebooks").mkdir()
    monkeypatch.setattr(paths, "REPO_ROOT", root)
    return root


def test_relative_paths_resolve_against_the_repo_root_from_any_cwd(repo, monkeypatch):
    p = _profile("models/tiny", "corpus")  # "models/tiny" also looks like a hub id: only the rule tells them apart
    seen = []
    for cwd in (repo, repo / "notebooks"):
        monkeypatch.chdir(cwd)
        seen.append((teacher_cache.validate(p), teacher.resolve_source(p.teacher), data.normalize_source(p.data.source),
                     teacher_cache.resolve_key(p)[3]))
    assert seen[0] == seen[1]
    kind, path, spec, _ = seen[0]
    assert kind == "folder" and path == str(repo / "models" / "tiny")
    assert spec["files"] == [str(repo / "corpus" / f"doc{i:03d}.txt") for i in range(len(spec["files"]))]


def test_absolute_and_home_paths_are_taken_as_given(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.resolve_profile_path("~/models/x") == tmp_path / "home" / "models" / "x"
    assert paths.resolve_profile_path(tmp_path / "abs") == tmp_path / "abs"
    assert paths.resolve_profile_path("models/x") == repo / "models" / "x"
    monkeypatch.chdir(tmp_path)
    assert teacher.check_teacher_source(str(repo / "models" / "tiny")) == "folder"
    with pytest.raises(ParamError, match=r"repo/repo/models/tiny does not exist"):  # never read from the cwd
        teacher.check_teacher_source("repo/models/tiny")


def test_data_source_paths_get_a_files_suggestion(repo):
    with pytest.raises(ParamError, match=r"data.source: 'corpus' is a path \(.*repo/corpus\), not a source name; "
                                         r"use \{files: \[corpus/\*.txt\]\}"):
        data.normalize_source("corpus")
    with pytest.raises(ParamError, match=r"'corpus/doc000.txt' is a path .*use \{files: \[corpus/doc000.txt\]\}"):
        data.normalize_source("corpus/doc000.txt")
    with pytest.raises(ParamError, match=r"data.source: files: 'corpus/' is a directory \(.*repo/corpus\); use a "
                                         r"glob such as corpus/\*.txt"):
        data.normalize_source({"files": ["corpus/"]})
    with pytest.raises(ParamError, match=r"'wikitext' is not a known source .*\{hub: wikitext, split: train\}"):
        data.normalize_source("wikitext")
