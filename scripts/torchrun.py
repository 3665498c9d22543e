#!/usr/bin/python3
"""torchrun, runnable on Debian 12: `python3 scripts/torchrun.py` takes torchrun's arguments.

Debian 12's torchrun (python3-torch 1.13) fails on every launch under Python 3.11 with
"AttributeError: 'NoneType' object has no attribute 'get'": it parses --redirects/--tee (default
"0") by iterating its Std flag enum, and Python 3.11 no longer yields the zero and composite
members when iterating a Flag. This wrapper replaces that parser with one that looks the values
up directly, then runs torchrun's own main(). Elsewhere, plain `torchrun` is the same thing.

    python3 scripts/torchrun.py --nproc_per_node=2 --no_python build/zoo train gpt-tiny
"""
import re
import sys

from torch.distributed.elastic.multiprocessing.api import Std
from torch.distributed.run import main


def std_from_str(vm):
    if re.fullmatch(r"[0-3]", vm):
        return Std(int(vm))
    if re.fullmatch(r"(\d+:[0-3],)*\d+:[0-3]", vm):
        return {int(rank): Std(int(value)) for rank, value in (item.split(":") for item in vm.split(","))}
    raise ValueError(f"{vm} does not match a number 0-3 or a mapping like 0:1,1:2")


if Std.from_str("0") is None:  # the broken parse; leave a working torchrun alone
    Std.from_str = staticmethod(std_from_str)

if __name__ == "__main__":
    sys.exit(main())
