import json

import pytest
import torch

from normgrow.__main__ import main
from normgrow.export import export_student
from normgrow.model import Student, StudentConfig, load_student, save_student

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


def test_post_norm_export_roundtrips(tmp_path):
    model = random_student("post", tie=False)
    src = run_dir(tmp_path, model, {"step": 3})
    main(["export", str(src / "checkpoints" / "final.pt"), str(tmp_path / "out")])
    info = json.loads((tmp_path / "out" / "normgrow_export.json").read_text())
    assert info["format"] == "normgrow" and "not a transformers architecture" in info["message"]
    assert json.loads((tmp_path / "out" / "config.json").read_text())["norm"] == "post"
    loaded = load_student(tmp_path / "out")
    idx = torch.randint(V, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(idx), model(idx))


def test_cli_copies_tokenizer(tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    vocab = {"<bos>": 0, "<eos>": 1, **{f"w{i}": i + 2 for i in range(V - 2)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>").save_pretrained(
        tmp_path / "tok")
    src = run_dir(tmp_path, random_student("pre"), {"tokenizer_dir": str(tmp_path / "tok")})
    main(["export", str(src), str(tmp_path / "hf")])
    assert "Qwen3ForCausalLM" in capsys.readouterr().out
    assert AutoTokenizer.from_pretrained(tmp_path / "hf")("w3 w5").input_ids == [5, 7]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)


def test_cli_errors(tmp_path):
    with pytest.raises(SystemExit):
        main([])
    with pytest.raises(FileNotFoundError, match="checkpoints/final.pt"):
        main(["export", str(tmp_path), str(tmp_path / "out")])
