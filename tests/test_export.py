import errno
import json
import re

import pytest
import torch

from normgrow.__main__ import main
from normgrow.export import export_student, to_qwen3
from normgrow.student.model import Student, StudentConfig, load_student, save_student
from normgrow.student.placements import PLACEMENTS

V = 96


def random_student(norm="pre", tie=True, n_kv_heads=2, n_layers=2):
    """Random weights everywhere, norm gains included, so a swapped or missing mapping shows in the logits."""
    torch.manual_seed(0)
    cfg = StudentConfig(vocab_size=V, n_layers=n_layers, d_model=32, n_heads=4, n_kv_heads=n_kv_heads, head_dim=8,
                        d_ff=40, norm=norm, tie_embeddings=tie, rope_theta=500.0, rms_eps=1e-5, init_std=0.2,
                        max_seq_len=64)
    model = Student(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def run_dir(tmp_path, model, extra=None):
    save_student(tmp_path / "run" / "checkpoints" / "final.pt", model, extra)
    return tmp_path / "run"


@pytest.mark.parametrize("tie,n_kv_heads", [(True, 4), (False, 2), (True, 1)])
def test_pre_norm_exports_to_qwen3(tmp_path, tie, n_kv_heads):
    from transformers import AutoModelForCausalLM

    model = random_student("pre", tie, n_kv_heads)
    model.append_blocks(1, init="copy_last")  # a grown student exports like any other
    info = export_student(run_dir(tmp_path, model), tmp_path / "hf")
    assert info["format"] == "transformers" and info["max_logit_diff"] <= 1e-4
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").float().eval()
    assert type(hf).__name__ == "Qwen3ForCausalLM"
    c = hf.config
    assert (c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.tie_word_embeddings) == (3, n_kv_heads, 8, tie)
    assert c.rope_parameters["rope_theta"] == 500.0 and c.rms_norm_eps == 1e-5
    idx = torch.randint(V, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (hf(input_ids=idx).logits - model(idx)).abs().max() <= 1e-4


@pytest.mark.parametrize("norm", [n for n, p in PLACEMENTS.items() if not p.exports_to_qwen3])
def test_other_placements_export_as_normgrow_checkpoints(tmp_path, norm):
    model = random_student(norm, tie=False)
    model.append_blocks(1, init="gated")  # the gate is no part of a checkpoint
    src = run_dir(tmp_path, model, {"step": 3})
    main(["export", str(src / "checkpoints" / "final.pt"), str(tmp_path / "out")])
    info = json.loads((tmp_path / "out" / "normgrow_export.json").read_text())
    assert info["format"] == "normgrow" and "not a transformers architecture" in info["message"]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["norm"] == norm
    model.blocks[-1].gate = None  # what the checkpoint holds: the block after its ramp
    with pytest.raises(ValueError, match=f"norm='{norm}' has no transformers architecture; only pre maps to Qwen3"):
        to_qwen3(model)
    loaded = load_student(tmp_path / "out")
    idx = torch.randint(V, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(idx), model(idx))


def save_tokenizer(folder):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<bos>": 0, "<eos>": 1, **{f"w{i}": i + 2 for i in range(V - 2)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>").save_pretrained(folder)
    return folder


def test_cli_copies_tokenizer(tmp_path, capsys):
    from transformers import AutoTokenizer

    save_tokenizer(tmp_path / "tok")
    src = run_dir(tmp_path, random_student("pre"), {"tokenizer_dir": str(tmp_path / "tok")})
    main(["export", str(src), str(tmp_path / "hf")])
    assert "Qwen3ForCausalLM" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path / "hf")("w3 w5").input_ids == [5, 7]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)


def test_cli_errors(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([])
    capsys.readouterr()
    assert main(["export", str(tmp_path), str(tmp_path / "out")]) == 2  # one error line, no traceback
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "checkpoints/final.pt" in err and len(err.splitlines()) == 1


@pytest.fixture
def study_run(tmp_path, monkeypatch):
    """outputs/runs/tiny/r (config.json naming its teacher cache, checkpoints/final.pt with a corpus vocabulary) and
    outputs/teacher/<key>/tokenizer, under a temporary outputs root."""
    monkeypatch.setenv("NORMGROW_OUTPUTS", str(tmp_path / "outputs"))
    save_tokenizer(tmp_path / "outputs" / "teacher" / "k123" / "tokenizer")
    run = tmp_path / "outputs" / "runs" / "tiny" / "r"
    vocab = {"teacher_vocab_size": 500, "teacher_ids": list(range(400, 400 + V))}
    save_student(run / "checkpoints" / "final.pt", random_student("pre"), {"vocab": vocab})
    (run / "config.json").write_text(json.dumps({"run_name": "r", "teacher_key": "k123"}))
    return run


def refused(capsys, args: list[str], match: str) -> None:
    """The command line refuses: exit code 2 and one `error: ...` line matching match."""
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and re.search(match, err), err


def test_export_refuses_run_dirs_and_nonempty_folders(study_run, tmp_path, capsys):
    config_bytes = (study_run / "config.json").read_bytes()
    for dest in (study_run, study_run / "checkpoints", study_run / "new", study_run.parent / "other"):
        for force in ([], ["--force"]):
            refused(capsys, ["export", str(study_run), str(dest)] + force, "would overwrite the run's files")
    assert (study_run / "config.json").read_bytes() == config_bytes
    assert not (study_run / "new").exists() and not (study_run.parent / "other").exists()
    # a folder holding another run's files, outside outputs/runs
    other = tmp_path / "elsewhere"
    (other / "checkpoints").mkdir(parents=True)
    (other / "config.json").write_text("{}")
    refused(capsys, ["export", str(study_run), str(other), "--force"], f"the run directory {other}")
    # a non-empty folder: only with --force, which overwrites the exported files and deletes nothing
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "keep.txt").write_text("mine")
    refused(capsys, ["export", str(study_run), str(dest)], "exists and is not empty.*--force")
    main(["export", str(study_run), str(dest), "--force"])
    assert (dest / "keep.txt").read_text() == "mine" and (dest / "model.safetensors").is_file()


def test_export_finds_the_runs_tokenizer(study_run, tmp_path):
    from transformers import AutoTokenizer

    info = export_student(study_run, tmp_path / "hf")
    assert info["tokenizer_dir"] == str(study_run.parents[2] / "teacher" / "k123" / "tokenizer")
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok("w3 w5").input_ids == [5, 7]
    vocab = json.loads((tmp_path / "hf" / "normgrow_vocab.json").read_text())
    assert vocab["teacher_ids"][:2] == [400, 401] and len(vocab["teacher_ids"]) == V
    # the same run exported again from its checkpoint file finds the same tokenizer; without the cache there is none
    assert export_student(study_run / "checkpoints" / "final.pt", tmp_path / "hf2")["tokenizer_dir"] == \
        info["tokenizer_dir"]
    import shutil
    shutil.rmtree(study_run.parents[2] / "teacher")
    info = export_student(study_run, tmp_path / "hf3")
    assert info["tokenizer_dir"] is None and "No tokenizer found" in info["message"]


def test_a_corpus_vocabulary_export_carries_the_student_s_own_special_ids(tmp_path, capsys):
    """Tokenizer ids <bos> 0, <eos> 1, "nl" 2, <pad> 3; the corpus holds <bos>, nl, <pad> and words but never <eos>,
    so the student's id 1 is nl. The exported config maps bos and pad to the student's ids (0 and 2) and sets eos,
    which the student lacks, to None with a warning: a student that always predicts nl generates past it (with the
    tokenizer's eos id 1 it stopped at the first newline), and pads a batch's prompt with its pad id."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    words = {"<bos>": 0, "<eos>": 1, "nl": 2, "<pad>": 3, **{f"w{i}": i + 4 for i in range(V)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>",
                            pad_token="<pad>").save_pretrained(tmp_path / "tok")
    teacher_ids = [0, 2, 3, *range(4, 4 + V - 3)]  # student ids: 0 <bos>, 1 nl, 2 <pad>, then words
    model = random_student("pre", tie=False)
    with torch.no_grad():  # blocks add nothing, every embedding is the same: the head alone picks nl (id 1)
        for block in model.blocks:
            for name, p in block.named_parameters():
                if "norm" not in name:
                    p.zero_()
        model.embed_tokens.weight.fill_(1.0)
        model.norm.weight.fill_(1.0)
        model.lm_head.weight.zero_()
        model.lm_head.weight[1] = 1.0
    src = run_dir(tmp_path, model, {"tokenizer_dir": str(tmp_path / "tok"),
                                    "vocab": {"teacher_vocab_size": 4 + V, "teacher_ids": teacher_ids}})
    info = export_student(src, tmp_path / "hf")
    assert info["token_ids"] == {"bos_token_id": 0, "eos_token_id": None, "pad_token_id": 2}
    assert "eos_token_id=1 of the tokenizer is not in the student's corpus vocabulary" in capsys.readouterr().out
    assert "eos_token_id=1" in info["message"]
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").float().eval()
    assert (hf.config.bos_token_id, hf.config.eos_token_id, hf.config.pad_token_id) == (0, None, 2)
    prompts = torch.tensor([[2, 0, 5], [0, 6, 7]])  # the first prompt left-padded with the student's pad id
    out = hf.generate(prompts, attention_mask=(prompts != hf.config.pad_token_id).long(), max_new_tokens=4,
                      do_sample=False)
    assert out[:, 3:].tolist() == [[1] * 4, [1] * 4]  # four newlines each: no stop at the first one


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"),
                                   RuntimeError("[enforce fail at inline_container.cc:659] . unexpected pos 320 vs "
                                                "206. PytorchStreamWriter failed writing file data/0: file write "
                                                "failed")])
def test_export_disk_full(tmp_path, monkeypatch, error):
    import normgrow.export as export

    def full(*a, **k):
        raise error
    monkeypatch.setattr(export, "save_student", full)
    src = run_dir(tmp_path, random_student("post"))
    with pytest.raises(OSError, match=f"no space left on device while writing {tmp_path / 'out'}") as e:
        export_student(src, tmp_path / "out")
    assert e.value.errno == errno.ENOSPC
