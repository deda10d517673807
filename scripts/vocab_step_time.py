"""docs/DESIGN.md evidence (Levers): training-step time of the cpu-profile student with the full vs the corpus vocabulary, interleaved
rounds, median of 5 after a warmup, same process. Run: .venv/bin/python scripts/vocab_step_time.py"""
import time
import statistics
import torch
from normgrow.config import load_profile, DistillParams
from normgrow.student.model import Student, StudentConfig
from normgrow.train import distill
from normgrow.train.optim import make_optimizer
from normgrow.utils import resolve_dtype
torch.set_num_threads(1)
p = load_profile("cpu")
s = p.student
dt = resolve_dtype("auto", torch.device("cpu"))
B, L, k = 4, 256, 32
def setup(V):
    torch.manual_seed(0)
    m = Student(StudentConfig(vocab_size=V, n_layers=9, d_model=s.d_model, n_heads=s.n_heads, n_kv_heads=s.n_kv_heads,
                              head_dim=s.head_dim, d_ff=s.d_ff, norm="pre"))
    opt = make_optimizer(m, p.train, None)
    tok = torch.randint(V, (B, L))
    ids = torch.randint(V, (B * L, k))
    lp = torch.log_softmax(torch.randn(B * L, k + 1), -1)
    rows = {"targets": tok.roll(-1, 1).flatten(), "topk_ids": ids, "topk_logp": lp[:, :k].sort(-1, descending=True).values,
            "tail_logp": lp[:, k], "mask": torch.ones(B * L, dtype=torch.bool)}
    def step():
        with torch.autocast("cpu", dtype=dt, enabled=dt != torch.float32):
            loss, _ = distill.distill_loss_chunked(m.hidden(tok).flatten(0, 1), m.head_weight, rows, DistillParams())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step
steps = {"full 49152": setup(49152), "corpus 12912": setup(12912)}
times = {n: [] for n in steps}
for r in range(6):
    for n, f in steps.items():
        distill.release_workspace()
        t = time.perf_counter()
        f()
        dtm = time.perf_counter() - t
        if r:
            times[n].append(dtm)
med = {n: statistics.median(v) for n, v in times.items()}
print("dtype", dt, {n: f"{v:.3f}s ({B*L/v:.0f} tok/s)" for n, v in med.items()}, "ratio", med["full 49152"] / med["corpus 12912"])
