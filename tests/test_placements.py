"""Norm placements: pre and post exactly as before the placements became components, and the other placements'
definitions."""
import pytest
import torch
from torch import nn

from normgrow.model import MLP, Attention, RMSNorm, RotaryEmbedding, Student, StudentConfig, init_weights

V = 64


def config(norm="pre", n_layers=3, **kw):
    return StudentConfig(vocab_size=V, n_layers=n_layers, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
                         norm=norm, **kw)


def tokens(B=2, T=10, seed=1):
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed))


class LegacyBlock(nn.Module):
    """model.Block as it was when pre and post were its two string branches (the reference of the bit-identity
    tests below): the same submodules, created in the same order, and the same forward ops."""

    def __init__(self, cfg):
        super().__init__()
        self.norm = cfg.norm
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.attn_norm = RMSNorm(cfg.d_model, cfg.rms_eps)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.rms_eps)

    def forward(self, x, rope):
        if self.norm == "pre":
            h = x + self.self_attn(self.attn_norm(x), rope)
            out = residual_sum = h + self.mlp(self.mlp_norm(h))
        else:
            h = self.attn_norm(x + self.self_attn(x, rope))
            residual_sum = h + self.mlp(h)
            out = self.mlp_norm(residual_sum)
        return out, residual_sum


class LegacyStudent(nn.Module):
    """model.Student's construction and forward as they were then."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(LegacyBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.rms_eps) if cfg.norm == "pre" else nn.Identity()
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_theta)
        init_weights(self, cfg.init_std)

    def forward(self, idx):
        rope = self.rope(idx.shape[1])
        h, sums = self.embed_tokens(idx), []
        for block in self.blocks:
            h, s = block(h, rope)
            sums.append(s)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return torch.nn.functional.linear(self.norm(h), head), sums


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("tie", [True, False])
def test_pre_and_post_are_bit_identical_to_the_string_branches(norm, tie):
    """Same parameter names in the same order, the same initial weights from the same seed, and logits and residual
    sums equal with torch.equal, in float32 and under bf16 autocast."""
    cfg = config(norm, tie_embeddings=tie, init_std=0.05)
    torch.manual_seed(7)
    legacy = LegacyStudent(cfg).eval()
    torch.manual_seed(7)
    model = Student(cfg).eval()
    assert list(model.state_dict()) == list(legacy.state_dict())
    for (name, a), (_, b) in zip(model.state_dict().items(), legacy.state_dict().items()):
        assert torch.equal(a, b), name
    idx = tokens()
    with torch.no_grad():
        logits, sums = legacy(idx)
        hs, model_sums = model.boundaries(idx, residual_sums=True)
        assert torch.equal(model(idx), logits)
        assert all(torch.equal(a, b) for a, b in zip(model_sums, sums))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(model(idx), legacy(idx)[0])
