"""student.parametrization: muP at its base width is the standard student bit for bit; away from it the init, the
per-group lrs and the head's multiplier follow parametrization.py; and the coordinate check (Yang et al. 2022):
under muP every layer's activation size and its update size are flat across widths 32-512, for pre- and post-norm,
joint and grown, where the standard parametrization's updates grow with width."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normgrow.student.model import Student, StudentConfig
from normgrow.train.optim import make_optimizer
from normgrow.train.step import StepSetup, train_step

V, T, B = 256, 32, 4
ADAMW = SimpleNamespace(lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, optimizer_on_grow="reset")


def config(width, parametrization="mup", norm="pre", n_layers=3, init_std=0.0625, **kw):
    """head_dim fixed (16), heads, kv heads and d_ff scaled with width, as the width grid scales them."""
    return StudentConfig(vocab_size=V, n_layers=n_layers, d_model=width, n_heads=width // 16,
                         n_kv_heads=max(width // 32, 1), head_dim=16, d_ff=3 * width, init_std=init_std,
                         parametrization=parametrization, base_width=64, norm=norm, **kw)


class NextTokenCE(nn.Module):
    """A step's forward for train_step: the student's logits against fixed random targets."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, batch):
        logits = self.model(batch["tokens"])
        return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten()), {}


def batch(seed):
    g = torch.Generator().manual_seed(1000 + seed)
    tokens, targets = torch.randint(V, (B, T), generator=g), torch.randint(V, (B, T), generator=g)
    return {"tokens": tokens, "targets": targets, "mask": torch.ones_like(tokens)}


def train(model, data, steps, lr=ADAMW.lr):
    """steps of the run loop's train_step under make_optimizer's groups (their lr_scale included)."""
    setup = StepSetup(NextTokenCE(model), make_optimizer(model, ADAMW, None), list(model.parameters()), 1.0,
                      torch.device("cpu"), torch.float32)
    for _ in range(steps):
        train_step(setup, data, lr, B * T)


def test_mup_at_its_base_width_is_the_standard_student_bit_for_bit():
    """Same init (the same draws, std factors of exactly 1), same optimizer groups' effect, same steps: every
    parameter equal after training, joint and grown."""
    models = []
    for parametrization in ("standard", "mup"):
        torch.manual_seed(0)
        model = Student(config(64, parametrization, n_layers=1))
        train(model, batch(0), 3)
        model.append_blocks(2, generator=torch.Generator().manual_seed(1))
        train(model, batch(0), 3)
        models.append(model)
    standard, mup = (m.state_dict() for m in models)
    assert standard.keys() == mup.keys()
    assert all(torch.equal(standard[k], mup[k]) for k in standard)


def test_mup_scales_hidden_init_lrs_and_the_head_away_from_its_base_width():
    torch.manual_seed(0)
    model = Student(config(256))  # m = 4
    block = model.blocks[0]
    assert model.embed_tokens.weight.std().item() == pytest.approx(0.0625, rel=0.02)
    assert block.mlp.up_proj.weight.std().item() == pytest.approx(0.0625 / 2, rel=0.02)
    groups = make_optimizer(model, ADAMW, None).param_groups
    hidden = [g for g in groups if g["lr_scale"] != 1.0]
    assert len(hidden) == 1 and hidden[0]["lr_scale"] == 0.25 and hidden[0]["weight_decay"] == pytest.approx(0.4)
    hidden_ids = {id(p) for p in hidden[0]["params"]}
    assert id(block.mlp.up_proj.weight) in hidden_ids and id(model.embed_tokens.weight) not in hidden_ids
    assert not any(id(p) in hidden_ids for n, p in model.named_parameters() if p.ndim < 2)
    idx = batch(0)["tokens"]
    with torch.no_grad():
        plain = F.linear(model.norm(model.boundaries(idx)[-1]), model.head_weight)
        assert torch.allclose(model(idx), plain / 4)


def coordinate_sizes(width, parametrization, norm, schedule, seed, steps=8):
    """log2 RMS of every layer's output (h_0 .. h_N, the logits) before `steps` updates, and log2 RMS of its change
    over them, on a fixed batch. Grown: one block trained `steps` updates, then two appended (the sizes are those
    of the grown model)."""
    torch.manual_seed(seed)
    init_std = 0.0625 if parametrization == "mup" else 0.5 / math.sqrt(width)  # standard: fan-in init, as the ladder
    model = Student(config(width, parametrization, norm, 1 if schedule == "grow" else 3, init_std))
    data = batch(seed)
    if schedule == "grow":
        train(model, data, steps)
        model.append_blocks(2, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        before = [*model.boundaries(data["tokens"]), model(data["tokens"])]
    train(model, data, steps)
    with torch.no_grad():
        after = [*model.boundaries(data["tokens"]), model(data["tokens"])]
    rms = lambda t: math.log2(t.pow(2).mean().sqrt().item())  # noqa: E731
    return [rms(b) for b in before], [rms(a - b) for a, b in zip(after, before)]


WIDTHS = (32, 64, 128, 256, 512)


def slopes(parametrization, norm, schedule):
    """Per layer, the slope of log2 size against log2 width (mean over two seeds): 0 is flat, 1 grows as width."""
    sizes = [[coordinate_sizes(w, parametrization, norm, schedule, seed) for seed in (0, 1)] for w in WIDTHS]
    act = np.array([[s[0] for s in per_width] for per_width in sizes]).mean(1)
    upd = np.array([[s[1] for s in per_width] for per_width in sizes]).mean(1)
    x = np.log2(WIDTHS)
    return (np.array([np.polyfit(x, act[:, j], 1)[0] for j in range(act.shape[1])]),
            np.array([np.polyfit(x, upd[:, j], 1)[0] for j in range(upd.shape[1])]))


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("schedule", ["joint", "grow"])
def test_coordinate_check_mup_layers_are_flat_across_widths(norm, schedule):
    """Under muP, from width 32 to 512 (16x): every boundary's activation RMS is flat (|slope| < 0.1 per doubling,
    under a factor 1.32 over the range), the logits at init shrink no faster than muP's 1/sqrt(m) (a random readout,
    slope -0.5), and every layer's update size, logits included, is flat within |slope| < 0.3. The standard
    parametrization at the same lr, with the fan-in init, fails the same check: its updates grow with width."""
    act, upd = slopes("mup", norm, schedule)
    assert np.all(np.abs(act[:-1]) < 0.1), act
    assert -0.55 < act[-1] < 0.05, act
    assert np.all(np.abs(upd) < 0.3), upd
    _, standard = slopes("standard", norm, schedule)
    assert standard.max() > 0.5, standard


def test_the_gpu_profiles_take_the_lrs_transferred_from_cpu_at_base_width_64():
    """gpu is the width grid's 128 rung on a GPU (its bracket is its tuning); paper is cpu at width 512 under muP.
    Both carry cpu's per-arm lrs and warmups, so a sweep written into cpu reaches them, and keep head_dim 16."""
    import dataclasses
    from normgrow.config import load_profile
    cpu, rung = load_profile("cpu"), load_profile("cpu-w128")
    for name, width in (("gpu", 128), ("paper", 512)):
        p = load_profile(name)
        assert (p.student.parametrization, p.student.base_width, p.student.d_model) == ("mup", cpu.student.d_model,
                                                                                        width)
        assert p.student.head_dim == cpu.student.head_dim and p.student.n_heads * p.student.head_dim == width
        assert p.train.lr == cpu.train.lr and p.train.warmup_steps == cpu.train.warmup_steps
    gpu = load_profile("gpu")
    assert gpu.student == rung.student and gpu.data == rung.data
    same = ("stages", "stage_tokens", "batch_size", "lr", "warmup_steps")
    assert [getattr(gpu.train, k) for k in same] == [getattr(rung.train, k) for k in same]
    assert dataclasses.replace(gpu.train, dtype=rung.train.dtype, device=rung.train.device,
                               compile=rung.train.compile) == rung.train
