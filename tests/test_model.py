import copy

import pytest
import torch

from normgrow.student.model import Student, StudentConfig, load_checkpoint, load_student, save_student

V = 128


def make(norm="pre", n_layers=2, **kw):
    torch.manual_seed(0)
    cfg = StudentConfig(vocab_size=V, n_layers=n_layers, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
                        norm=norm, **kw)
    return Student(cfg).eval()


def tokens(B=2, T=10, seed=1):
    return torch.randint(V, (B, T), generator=torch.Generator().manual_seed(seed))


def test_config_validation():
    with pytest.raises(ValueError, match="norm='sandwich'.*pre, post"):
        StudentConfig(vocab_size=V, n_layers=1, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
                      norm="sandwich")
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        StudentConfig(vocab_size=V, n_layers=1, d_model=32, n_heads=4, n_kv_heads=3, head_dim=8, d_ff=48)


def test_every_model_key_of_the_profile_s_student_section_reaches_the_model():
    """The model's config extends the model's part of the profile's student section (ModelParams, one declaration):
    each of its fields, set to a value other than its default in a profile, is the model's. Before, StudentConfig
    copied the fields it also declared, so a field declared on one side only (or renamed on one) silently took the
    default. The section's other keys (read by the training loop) are not the model's."""
    import dataclasses
    from normgrow.config import StudentParams, load_profile
    from normgrow.student.model import ModelParams
    student = load_profile("tiny").student
    model_keys = [f.name for f in dataclasses.fields(ModelParams)]
    changed = {f.name: (not f.default if isinstance(f.default, bool) else
                        f.default * 2 if isinstance(f.default, (int, float)) else f"not-{f.default}")
               for f in dataclasses.fields(ModelParams)}
    changed |= {"n_heads": 2, "n_kv_heads": 1, "head_dim": 8, "mix_alpha": 0.5,  # a valid shape, not the default
                "parametrization": "mup", "boundary": "normalize", "boundary_scale": (2.0,)}
    assert all(changed[f.name] != f.default for f in dataclasses.fields(ModelParams))
    cfg = StudentConfig.from_params(dataclasses.replace(student, **changed), vocab_size=V, n_layers=2)
    assert {name: getattr(cfg, name) for name in changed} == changed
    training_keys = {f.name for f in dataclasses.fields(StudentParams)} - set(model_keys)
    assert training_keys == {"new_block_init", "gate_ramp_steps", "vocab"}
    assert not training_keys & {f.name for f in dataclasses.fields(StudentConfig)}
    grown = Student(StudentConfig.from_params(student, vocab_size=V, n_layers=1))
    before = grown.cfg
    grown.append_blocks(2)
    assert grown.cfg.n_layers == 3 and before.n_layers == 1  # a grown model gets a new config; the old one stays


def test_a_checkpoint_saved_with_the_section_s_training_keys_loads(tmp_path):
    """A checkpoint whose config holds new_block_init, gate_ramp_steps and vocab (saved while the model's config
    carried the whole student section) loads into the same model."""
    from normgrow.student.model import load_checkpoint, save_student
    model = make()
    path = tmp_path / "old.pt"
    save_student(path, model)
    ckpt = torch.load(path, weights_only=True)
    ckpt["config"] |= {"new_block_init": "random", "gate_ramp_steps": 64, "vocab": "full"}
    torch.save(ckpt, path)
    loaded, _ = load_checkpoint(path)
    assert loaded.cfg == model.cfg
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_init_and_shapes():
    m = make(tie_embeddings=False, init_std=0.05)
    for name, p in m.named_parameters():
        if "norm" in name:
            assert torch.all(p == 1), name
        else:
            assert abs(p.std().item() - 0.05) < 0.01, name
    idx = tokens()
    assert m(idx).shape == (2, 10, V)
    assert m.head_weight is m.lm_head.weight
    tied = make()
    assert tied.lm_head is None and tied.head_weight is tied.embed_tokens.weight


def test_causal():
    m = make()
    idx = tokens()
    idx2 = idx.clone()
    idx2[:, 6:] = (idx2[:, 6:] + 1) % V
    with torch.no_grad():
        assert torch.allclose(m(idx)[:, :6], m(idx2)[:, :6], atol=1e-6)


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_boundaries(norm):
    m = make(norm, n_layers=3)
    idx = tokens()
    with torch.no_grad():
        hs = m.boundaries(idx)
        assert len(hs) == 4
        assert torch.equal(hs[0], m.embed_tokens(idx))
        last = m.norm(hs[-1]) if norm == "pre" else hs[-1]
        assert torch.equal(m.hidden(idx), last)
        assert torch.equal(m(idx), last @ m.head_weight.T)


def test_post_norm_has_no_final_norm_and_normalised_boundaries():
    m = make("post")
    assert not any(name.startswith("norm.") for name, _ in m.named_parameters())
    with torch.no_grad():
        for h in m.boundaries(tokens())[1:]:
            assert torch.allclose(h.pow(2).mean(-1), torch.ones(()), atol=1e-3)  # unit gains at init


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_block_residual_sum(norm):
    m = make(norm)
    x = torch.randn(2, 5, 32)
    rope = m.rope(5)
    block = m.blocks[0]
    with torch.no_grad():
        out, s = block(x, rope, return_residual_sum=True)
        assert torch.equal(out, block(x, rope))
        assert torch.equal(out, s if norm == "pre" else block.mlp_norm(s))


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("init", ["random", "copy_last", "zero_out"])
def test_append_blocks(norm, init):
    m = make(norm)
    idx = tokens()
    old = copy.deepcopy(m.state_dict())
    with torch.no_grad():
        logits0, prefix_out = m(idx), m.boundaries(idx)[-1]
    m.append_blocks(2, init=init, generator=torch.Generator().manual_seed(5))
    assert m.cfg.n_layers == 4 and len(m.blocks) == 4
    new = m.state_dict()
    for k, v in old.items():
        assert torch.equal(new[k], v), k  # prefix, embeddings, final norm untouched
    seen = []
    handle = m.blocks[2].register_forward_pre_hook(lambda mod, args: seen.append(args[0]))
    with torch.no_grad():
        logits1 = m(idx)
    handle.remove()
    assert torch.equal(seen[0], prefix_out)  # the first appended block reads the prefix's boundary
    b1, b2, last = m.blocks[1].state_dict(), m.blocks[2].state_dict(), m.blocks[3].state_dict()
    if init == "copy_last":
        assert all(torch.equal(b1[k], b2[k]) and torch.equal(b1[k], last[k]) for k in b1)
        assert m.blocks[2].self_attn.q_proj.weight is not m.blocks[1].self_attn.q_proj.weight
    else:
        assert not torch.equal(b2["self_attn.q_proj.weight"], b1["self_attn.q_proj.weight"])
        assert not torch.equal(b2["self_attn.q_proj.weight"], last["self_attn.q_proj.weight"])
    if init == "zero_out":
        assert torch.all(b2["self_attn.o_proj.weight"] == 0) and torch.all(b2["mlp.down_proj.weight"] == 0)
        if norm == "pre":
            assert torch.equal(logits1, logits0)  # exact identity under pre-norm
    if init == "random":
        assert not torch.allclose(logits1, logits0)


def test_append_blocks_generator_reproducible():
    a, b = make(), make()
    a.append_blocks(1, generator=torch.Generator().manual_seed(3))
    b.append_blocks(1, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="copy_last, zero_out"):
        a.append_blocks(1, init="identity")


def test_caller_config_not_mutated():
    m = make()
    cfg = StudentConfig(**{**m.cfg.__dict__})
    s = Student(cfg)
    s.append_blocks(1)
    assert cfg.n_layers == 2 and s.cfg.n_layers == 3


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_save_load_roundtrip(tmp_path, norm):
    m = make(norm, tie_embeddings=False)
    m.append_blocks(1)
    path = tmp_path / "run" / "checkpoints" / "final.pt"
    save_student(path, m, {"step": 7, "tokenizer_dir": None})
    assert not list(path.parent.glob("*.tmp"))
    loaded, extra = load_checkpoint(tmp_path / "run")
    assert extra == {"step": 7, "tokenizer_dir": None}
    assert loaded.cfg == m.cfg
    idx = tokens()
    with torch.no_grad():
        assert torch.equal(load_student(path)(idx), m(idx))


def test_bf16_autocast_runs():
    m = make("post")
    idx = tokens()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = m(idx)
    assert logits.dtype == torch.bfloat16
    with torch.no_grad():
        assert (logits.float() - m(idx)).abs().max() < 0.05



def test_the_boundary_operation_acts_where_blocks_attach_once_a_block_sits_above():
    """student.boundary: at each boundary depth (train.stages but the last) the blocks above read h at unit RMS
    (normalize) or times its factor (scale), in the joint student and the grown one alike; below it, and with no
    block above yet (a 1-block phase, the single-block control), nothing changes; none is the plain student."""
    idx = tokens()
    plain = make(n_layers=3)
    plain_h = plain.boundaries(idx)
    for op, check in (("normalize", lambda h, ref: h.pow(2).mean(-1).sqrt()),
                      ("scale", lambda h, ref: h / ref)):
        model = make(n_layers=3, boundary=op, boundary_scale=(3.0, 0.5), boundary_depths=(1, 2))
        assert torch.equal(model.state_dict()["embed_tokens.weight"], plain.state_dict()["embed_tokens.weight"])
        with torch.no_grad():
            hs = model.boundaries(idx)
            assert torch.equal(hs[0], plain_h[0])
            h1 = check(hs[1], plain_h[1])
            assert torch.allclose(h1, torch.full_like(h1, 1.0 if op == "normalize" else 3.0), atol=3e-3)  # eps
            assert not torch.allclose(hs[3], plain_h[3])
            shallow = make(n_layers=1, boundary=op, boundary_scale=(3.0, 0.5), boundary_depths=(1, 2))
            assert torch.equal(shallow(idx), make(n_layers=1)(idx))
    with pytest.raises(ValueError, match="one factor per boundary depth"):
        make(boundary="scale", boundary_scale=(2.0,), boundary_depths=(1, 2))


def test_attention_kernel_runs_in_float32_on_cpu_under_bf16_autocast(monkeypatch):
    """The projections stay in bf16; the attention kernel gets float32 q, k, v and its output is cast back."""
    from normgrow.student import model as model_module
    seen, sdpa = [], model_module.F.scaled_dot_product_attention

    def recording(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype))
        return sdpa(q, k, v, **kw)
    monkeypatch.setattr(model_module.F, "scaled_dot_product_attention", recording)
    m = make()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = m(tokens())
    assert seen == [(torch.float32,) * 3] * 2 and logits.dtype == torch.bfloat16
