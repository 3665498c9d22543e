"""Saves named tensors for the C++ tests: buffers of a TorchScript module ('.' in names becomes
'__'), which C++ loads with torch::jit::load (tests/test_util.h: python_reference)."""
import warnings

import torch

# TorchScript is deprecated in PyTorch 2.x (FutureWarning) but still saves and loads modules.
warnings.filterwarnings("ignore", category=FutureWarning, module="torch.jit")


class Tensors(torch.nn.Module):
    def __init__(self, tensors):
        super().__init__()
        for name, value in tensors.items():
            self.register_buffer(name.replace(".", "__"), value.detach().clone().contiguous())

    def forward(self):
        return 0


def save_tensors(tensors, path):
    torch.jit.save(torch.jit.script(Tensors(tensors)), path)
