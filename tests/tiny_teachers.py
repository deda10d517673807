"""Teachers that are not the bundled one, built in seconds: a corpus of short .txt documents, a byte-level BPE
tokenizer trained on it (pad id 0, BOS 1, EOS 2: not SmolLM2's ids), a tiny random LlamaForCausalLM over that
vocabulary, saved as a transformers folder or written as a llama-architecture GGUF file."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

SPECIALS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2
WORDS = ("the lord king god man house land day people son water city light hand word heart said went came saw "
         "gave upon unto and of to in that with for not his her their is was be shall will thou thee my").split()
HIDDEN, HEADS, KV_HEADS, LAYERS = 32, 2, 1, 2


def corpus_texts(n: int = 48, seed: int = 0) -> list[str]:
    """n short documents of a few sentences each."""
    rng = np.random.default_rng(seed)
    return [" ".join(" ".join(rng.choice(WORDS, size=rng.integers(5, 14))).capitalize() + "."
                     for _ in range(rng.integers(3, 8))) for _ in range(n)]


def write_corpus(folder: Path, texts: list[str]) -> Path:
    """One .txt file per document."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(texts):
        (folder / f"doc{i:03d}.txt").write_text(text + "\n")
    return folder


def train_tokenizer(texts: list[str], vocab_size: int = 320):
    """A byte-level BPE trained on texts (every string encodes), wrapped as a transformers fast tokenizer."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=1, special_tokens=list(SPECIALS),
                            show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token=SPECIALS[0], bos_token=SPECIALS[1],
                                   eos_token=SPECIALS[2])


def tiny_llama(vocab_size: int, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=256,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, pad_token_id=0,
                      bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper than the default init, so top-k ordering has no near-ties
        model.get_input_embeddings().weight.normal_(0, 1.0)
    return model.eval()


def save_folder_teacher(folder: Path, texts: list[str], seed: int = 0) -> Path:
    """A transformers folder (config.json, model.safetensors, tokenizer files) of a tiny Llama and its tokenizer."""
    tok = train_tokenizer(texts)
    tiny_llama(len(tok), seed).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def _rope_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (interleaved rotary halves); transformers' GGUF reader undoes it."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path: Path, model, tokenizer) -> Path:
    """The model (float32 tensors) and its byte-level BPE tokenizer as a llama-architecture GGUF file, with the
    metadata keys llama.cpp's converter writes and transformers' GGUF reader maps back."""
    import gguf
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny llama")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    spec = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    tokens = sorted(spec["vocab"], key=spec["vocab"].get)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in spec["merges"]])
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])  # 3: control (special) token
    w.add_pad_token_id(tokenizer.pad_token_id)
    w.add_bos_token_id(tokenizer.bos_token_id)
    w.add_eos_token_id(tokenizer.eos_token_id)
    w.add_add_bos_token(False)
    for name, tensor in model.state_dict().items():
        if name == "lm_head.weight":  # tied: the file has no output.weight
            continue
        a = tensor.float().numpy()
        if name == "model.embed_tokens.weight":
            w.add_tensor("token_embd.weight", a)
        elif name == "model.norm.weight":
            w.add_tensor("output_norm.weight", a)
        else:
            _, _, layer, *rest = name.split(".")
            leaf = GGUF_NAMES[".".join(rest[:-1])]
            if leaf in ("attn_q", "attn_k"):
                a = _rope_permute(a, cfg.num_attention_heads if leaf == "attn_q" else cfg.num_key_value_heads)
            w.add_tensor(f"blk.{layer}.{leaf}.weight", a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
