"""Growth operators: function preservation for every (operator, placement) pair an operator claims, the pairs it
does not claim, and the gated operator's ramp."""
import pytest
import numpy as np
import torch

import fakes
from normgrow.student.growth_ops import GROWTH_OPS
from normgrow.student.model import Student, StudentConfig
from normgrow.student.placements import PLACEMENTS
from normgrow.train.evaluate import evaluate
from normgrow.data.vocab import VocabMap

CACHE = fakes.fake_cache()


def prefix(norm, **kw):
    """A 2-block student of the 4-block run it will grow into (Mix-LN: block 0 post-norm, 1-3 pre-norm), with
    norm gains away from 1 as after training, so that a norm of a normalised input is not the identity."""
    torch.manual_seed(0)
    cfg = StudentConfig(vocab_size=fakes.VOCAB, n_layers=2, d_model=16, n_heads=2, n_kv_heads=1, head_dim=8, d_ff=32,
                        norm=norm, init_std=0.2, placement_depth=4, **kw)
    model = Student(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.mul_(1 + 0.5 * torch.rand_like(p))
    return model


def val_ce(model) -> float:
    """train.evaluate's validation CE on the synthetic cache's 8 validation rows, in float32."""
    return evaluate(model, CACHE.val, np.arange(8), 4, torch.device("cpu"), torch.float32,
                    VocabMap.for_cache(CACHE, "full"))["val_ce"]


def grown_val_ce(norm, init) -> tuple[float, float]:
    model = prefix(norm)
    before = val_ce(model)
    model.append_blocks(2, init=init, generator=torch.Generator().manual_seed(3))
    return before, val_ce(model)


CLAIMED = [(op.name, norm) for op in GROWTH_OPS.values() for norm in sorted(op.preserves)]


def test_the_claims():
    assert GROWTH_OPS["gated"].preserves == set(PLACEMENTS)
    assert GROWTH_OPS["zero_out"].preserves == {"pre", "lns", "peri", "mix"}
    assert not GROWTH_OPS["random"].preserves and not GROWTH_OPS["copy_last"].preserves


@pytest.mark.parametrize("init,norm", CLAIMED)
def test_growth_preserves_the_validation_loss(init, norm):
    before, after = grown_val_ce(norm, init)
    assert after == pytest.approx(before, abs=1e-6)


@pytest.mark.parametrize("norm", ["post", "deepnorm"])
def test_zero_out_does_not_preserve_it_when_the_block_normalises_its_output(norm):
    """RMSNorm(alpha * x + 0) is not x: the appended block still applies its norms to the prefix's output."""
    before, after = grown_val_ce(norm, "zero_out")
    assert abs(after - before) > 1e-3


@pytest.mark.parametrize("norm", sorted(PLACEMENTS))
def test_random_growth_changes_the_function(norm):
    """The control: the comparison above would see a change."""
    before, after = grown_val_ce(norm, "random")
    assert abs(after - before) > 1e-4


def test_gated_ramp_and_removal():
    """m = min(1, step / min(gate_ramp_steps, phase steps)), a pure function of the step; at m = 1 the gate leaves
    the computation, and the block computes what an ungated block computes."""
    op, student = GROWTH_OPS["gated"], type("Student", (), {"gate_ramp_steps": 4})
    model = prefix("pre")
    model.append_blocks(1, init="gated")
    (block,) = model.blocks[2:]
    x, rope = torch.randn(2, 5, 16), model.rope(5)
    with torch.no_grad():
        full = block.placement.forward(block, x, rope)[0]
        for step, m in ((0, 0.0), (1, 0.25), (3, 0.75)):
            op.at_step([block], step, 10, student)
            assert block.gate.item() == m
            torch.testing.assert_close(block(x, rope), x + m * (full - x), rtol=0, atol=1e-6)
        op.at_step([block], 4, 10, student)
        assert block.gate is None and torch.equal(block(x, rope), full)
        op.at_step([block], 1, 2, student)  # a phase shorter than the ramp ramps over its own steps
        assert block.gate.item() == 0.5
    assert "gate" not in model.state_dict() and not any(k.endswith(".gate") for k in model.state_dict())


def test_copy_last_takes_the_placement_of_its_own_layer():
    model = prefix("lns")
    model.append_blocks(1, init="copy_last")
    assert model.blocks[2].placement.scale == pytest.approx(3 ** -0.5)
    assert model.blocks[1].placement.scale == pytest.approx(2 ** -0.5)
    with pytest.raises(ValueError, match="allowed values: random, copy_last, zero_out, gated"):
        model.append_blocks(1, init="identity")
