"""docs/DESIGN.md evidence (Post-norm and the init scale): how much each block changes the residual stream at initialisation,
pre vs post, at init_std 0.02 and 0.0625, on 8 validation sequences of the cpu cache. Run: .venv/bin/python scripts/init_update_ratio.py"""
import torch
import numpy as np
from normgrow.config import load_profile
from normgrow.data.teacher_cache import open_cache
from normgrow.student.model import Student, StudentConfig
from normgrow.data.vocab import VocabMap
torch.set_num_threads(1)
p = load_profile("cpu")
s = p.student
cache = open_cache(p)
vm = VocabMap.for_cache(cache, "corpus")
tok = vm.restrict({"tokens": torch.from_numpy(np.array(cache.val.tokens[:8], dtype=np.int64)), "targets": torch.zeros(8, 256, dtype=torch.long),
                   "topk_ids": torch.zeros(8, 256, 1, dtype=torch.long), "topk_logp": torch.zeros(8, 256, 1), "tail_logp": torch.zeros(8, 256)})["tokens"]
for std in (0.02, 0.0625):
    for norm in ("pre", "post"):
        torch.manual_seed(0)
        m = Student(StudentConfig(vocab_size=vm.size, n_layers=9, d_model=s.d_model, n_heads=s.n_heads, n_kv_heads=s.n_kv_heads,
                                  head_dim=s.head_dim, d_ff=s.d_ff, norm=norm, init_std=std))
        with torch.no_grad():
            hs = m.boundaries(tok)
            r = [float(((b - a).norm(dim=-1) / a.norm(dim=-1)).mean()) for a, b in zip(hs[:-1], hs[1:])]
        print(f"init_std {std} {norm}: block update ratio |h_out - h_in| / |h_in| at init, blocks 1-8 mean "
              f"{np.mean(r[1:]):.3f} (block 0 {r[0]:.2f})")
