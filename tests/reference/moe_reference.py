"""transformers' sparse mixture-of-experts blocks on seeded weights and inputs, for zoo's
mixture-of-experts layer (layers/mixture_of_experts.h).

Usage: moe_reference.py OUT.pt

Two blocks, each with its weights as zoo holds them (router (E, D); gate_up (E, 2F, D), gate rows
then up rows; down (E, D, F)), a seeded input x (2, 5, D) with
its row-major flattening's real tokens in `mask` (N), and transformers' outputs:
  mixtral_*   MixtralSparseMoeBlock, 8 experts, top 2, the top-2 probabilities renormalised
  qwen3_*     Qwen3MoeSparseMoeBlock, 4 experts, top 1, norm_topk_prob false (the raw probability)
  *_out, *_router_logits   the block's output and its router's logits
  *_dx, *_dgate_up, *_drouter gradients of (out * probe).sum() (a seeded probe) by x, gate_up, router
  *_aux, *_aux_masked      load_balancing_loss_func over two layers' router logits (this block's
                           and the same block's on 2x), without and with the mask
Nothing here is shared with zoo.
"""
import sys

import torch

from tensor_file import save_tensors

D, F, BATCH, T = 16, 24, 2, 5


def block(kind):
    import transformers
    transformers.utils.logging.set_verbosity_error()
    if kind == "mixtral":
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock, load_balancing_loss_func
        config = transformers.MixtralConfig(hidden_size=D, intermediate_size=F, num_local_experts=8,
                                            num_experts_per_tok=2, hidden_act="silu", router_jitter_noise=0.0)
        return MixtralSparseMoeBlock(config), load_balancing_loss_func, 8, 2
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock, load_balancing_loss_func
    config = transformers.Qwen3MoeConfig(hidden_size=D, moe_intermediate_size=F, num_experts=4, num_experts_per_tok=1,
                                         norm_topk_prob=False, hidden_act="silu")
    return Qwen3MoeSparseMoeBlock(config), load_balancing_loss_func, 4, 1


def main(out_path):
    out = {}
    for kind, seed in (("mixtral", 11), ("qwen3", 12)):
        g = torch.Generator().manual_seed(seed)
        moe, aux_loss, experts, top_k = block(kind)
        with torch.no_grad():
            moe.gate.weight.copy_(torch.randn(experts, D, generator=g))
            moe.experts.gate_up_proj.copy_(torch.randn(experts, 2 * F, D, generator=g) * 0.3)
            moe.experts.down_proj.copy_(torch.randn(experts, D, F, generator=g) * 0.3)
        x = torch.randn(BATCH, T, D, generator=g).requires_grad_(True)
        probe = torch.randn(BATCH, T, D, generator=g)
        y = moe(x)
        (y * probe).sum().backward()
        logits = moe.gate(x.detach().reshape(-1, D))[0]
        logits_2x = moe.gate(2 * x.detach().reshape(-1, D))[0]
        mask = torch.ones(BATCH, T, dtype=torch.long)
        mask[1, -2:] = 0
        gate_up = moe.experts.gate_up_proj.detach()
        out.update({
            f"{kind}_router": moe.gate.weight.detach(), f"{kind}_gate_up": gate_up,
            f"{kind}_down": moe.experts.down_proj.detach(), f"{kind}_x": x.detach(), f"{kind}_probe": probe,
            f"{kind}_out": y.detach(), f"{kind}_router_logits": logits.detach(), f"{kind}_dx": x.grad,
            f"{kind}_dgate_up": moe.experts.gate_up_proj.grad, f"{kind}_drouter": moe.gate.weight.grad,
            f"{kind}_aux": torch.as_tensor(aux_loss((logits, logits_2x), experts, top_k)),
            f"{kind}_aux_masked": torch.as_tensor(aux_loss((logits, logits_2x), experts, top_k, mask)),
            f"{kind}_mask": mask.reshape(-1)})
    save_tensors({k: v.contiguous().clone() for k, v in out.items()}, out_path)


if __name__ == "__main__":
    main(*sys.argv[1:])
