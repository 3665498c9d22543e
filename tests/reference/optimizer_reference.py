"""Reference steps of PyTorch's own AdamW and gradient clipping, for zoo's optimizer tests.

Usage: optimizer_reference.py OUT.pt

Seeded parameters of odd sizes in two groups (weight decay 0.1 and 0, as zoo groups them), and
six steps of seeded gradients spanning 1, 1e-3 and 1e-6 in scale with a learning rate that
changes every step (a schedule). Each step's gradients are clipped to a global norm of 1 by
torch.nn.utils.clip_grad_norm_(foreach=True), then torch.optim.AdamW(fused=True) and
torch.optim.AdamW(foreach=True) each take the step. Saves the starting parameters, each step's
gradients (before clipping), learning rate and total norm, and both optimizers' parameters and
moments after the last step.
"""
import sys

import torch

from tensor_file import save_tensors

SHAPES = [(29, 37), (29,), (13, 7, 3), (5,)]
DECAY = [True, False, True, False]
STEPS = 6


def main(out):
    torch.manual_seed(7)
    start = [torch.randn(s) for s in SHAPES]
    grads = [[torch.randn(s) * 10.0 ** (-3 * (step % 3)) for s in SHAPES] for step in range(STEPS)]
    lrs = [0.01 * (1 + step) / STEPS for step in range(STEPS)]
    tensors = {"lr": torch.tensor(lrs, dtype=torch.float64)}
    for i, p in enumerate(start):
        tensors[f"start.{i}"] = p
        for step in range(STEPS):
            tensors[f"grad.{step}.{i}"] = grads[step][i]
    for kind in ("fused", "foreach"):
        params = [torch.nn.Parameter(p.clone()) for p in start]
        groups = [{"params": [p for p, d in zip(params, DECAY) if d], "weight_decay": 0.1},
                  {"params": [p for p, d in zip(params, DECAY) if not d], "weight_decay": 0.0}]
        options = {"fused": True} if kind == "fused" else {"foreach": True}
        opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(0.9, 0.95), eps=1e-8, **options)
        norms = []
        for step in range(STEPS):
            for p, g in zip(params, grads[step]):
                p.grad = g.clone()
            norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True))
            for group in opt.param_groups:
                group["lr"] = lrs[step]
            opt.step()
        tensors["norm"] = torch.stack(norms)
        for i, p in enumerate(params):
            tensors[f"{kind}.param.{i}"] = p.detach()
            tensors[f"{kind}.exp_avg.{i}"] = opt.state[p]["exp_avg"]
            tensors[f"{kind}.exp_avg_sq.{i}"] = opt.state[p]["exp_avg_sq"]
    save_tensors(tensors, out)


if __name__ == "__main__":
    main(sys.argv[1])
