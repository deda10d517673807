"""Norm placements: pre and post exactly as before the placements became components, and the other placements'
definitions."""
import pytest
import torch
from torch import nn

from normgrow.student.model import MLP, Attention, RMSNorm, RotaryEmbedding, Student, StudentConfig, init_weights

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
        init_weights(self, cfg)

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


def test_registry():
    from normgrow.student.model import NORMS
    from normgrow.student.placements import PLACEMENTS
    assert NORMS == tuple(PLACEMENTS) == ("pre", "post", "mix", "peri", "deepnorm", "lns")
    assert [n for n, p in PLACEMENTS.items() if p.exports_to_qwen3] == ["pre"]
    assert [n for n, p in PLACEMENTS.items() if not p.final_norm] == ["post", "deepnorm"]
    assert all(p.label for p in PLACEMENTS.values())
    with pytest.raises(ValueError, match="norm='sandwich' is not supported; allowed values: pre, post, mix, peri, "
                                         "deepnorm, lns"):
        config("sandwich")
    with pytest.raises(ValueError, match="mix_alpha=1.5 must be in"):
        config("mix", mix_alpha=1.5)
    assert config("pre", n_layers=3).placement_depth == 3


def block_io(norm, index=0, **kw):
    torch.manual_seed(0)
    model = Student(config(norm, **kw)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.3 * torch.randn_like(p))
    return model, model.blocks[index], torch.randn(2, 5, 32), model.rope(5)


def test_mix_is_post_norm_below_floor_alpha_l_and_pre_norm_above():
    model, _, x, rope = block_io("mix", n_layers=3, placement_depth=9)  # floor(0.25 * 9) = 2 post-norm blocks
    assert [b.placement.inner.name for b in model.blocks] == ["post", "post", "pre"]
    assert [b.placement.output_norm for b in model.blocks] == [True, True, False]
    assert isinstance(model.norm, RMSNorm)
    with torch.no_grad():
        b = model.blocks[1]
        h = b.attn_norm(x + b.self_attn(x, rope))
        assert torch.equal(b(x, rope), b.mlp_norm(h + b.mlp(h)))
        b = model.blocks[2]
        h = x + b.self_attn(b.attn_norm(x), rope)
        assert torch.equal(b(x, rope), h + b.mlp(b.mlp_norm(h)))


def test_peri_normalises_each_sublayers_input_and_output():
    model, b, x, rope = block_io("peri")
    assert [n for n, _ in b.named_children() if n.endswith("norm")] == ["attn_norm", "mlp_norm", "attn_out_norm",
                                                                        "mlp_out_norm"]
    assert isinstance(model.norm, RMSNorm)
    with torch.no_grad():
        h = x + b.attn_out_norm(b.self_attn(b.attn_norm(x), rope))
        out, s = b(x, rope, return_residual_sum=True)
        assert torch.equal(out, h + b.mlp_out_norm(b.mlp(b.mlp_norm(h)))) and torch.equal(s, out)


def test_deepnorm_constants_init_and_forward():
    """alpha = (2N)^(1/4), beta = (8N)^(-1/4) for N = 12: 2.2134 and 0.3195; v/o/FFN init std scaled by beta."""
    model, b, x, rope = block_io("deepnorm", n_layers=4, placement_depth=12, init_std=0.1)
    assert b.placement.alpha == pytest.approx(2.21336, abs=1e-5) and b.placement.beta == pytest.approx(0.31947,
                                                                                                       abs=1e-5)
    assert isinstance(model.norm, nn.Identity)
    for name, p in model.blocks.named_parameters():
        if name.endswith("proj.weight"):
            scaled = any(k in name for k in ("v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
            assert p.std().item() == pytest.approx(0.1 * (0.31947 if scaled else 1), rel=0.15), name
    with torch.no_grad():
        a = b.placement.alpha
        h = b.attn_norm(a * x + b.self_attn(x, rope))
        out, s = b(x, rope, return_residual_sum=True)
        assert torch.equal(s, a * h + b.mlp(h)) and torch.equal(out, b.mlp_norm(s))


def test_lns_scales_the_norm_outputs_by_one_over_sqrt_l():
    model, b, x, rope = block_io("lns", index=2)
    assert [blk.placement.scale for blk in model.blocks] == pytest.approx([1, 2 ** -0.5, 3 ** -0.5])
    with torch.no_grad():
        s = 3 ** -0.5
        h = x + b.self_attn(b.attn_norm(x) * s, rope)
        assert torch.equal(b(x, rope), h + b.mlp(b.mlp_norm(h) * s))


@pytest.mark.parametrize("norm", ["mix", "deepnorm", "lns"])
def test_a_grown_student_has_its_joint_counterparts_placement(norm):
    """placement_depth is the final depth: a 3-block student grown to 9 has the 9-block student's blocks."""
    joint = Student(config(norm, n_layers=9))
    grown = Student(config(norm, n_layers=3, placement_depth=9))
    grown.append_blocks(3, init="random")
    grown.append_blocks(3, init="copy_last")

    def constants(block):  # per-block state: Mix-LN's inner placement, DeepNorm's alpha and beta, LNS's scale
        return {k: type(v).__name__ if k == "inner" else v for k, v in vars(block.placement).items()}
    assert [constants(b) for b in grown.blocks] == [constants(b) for b in joint.blocks]
