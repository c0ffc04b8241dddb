"""fold-consts: computes that only move elements of const buffers become consts
(kernel/fold_consts.py), in every version, before fusion sees them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..fold_consts import fold_const_remaps
from ..module import KernelModule


@dataclass(frozen=True)
class FoldConstsPass:
    name: ClassVar[str] = "fold-consts"

    def run(self, module: KernelModule, ctx) -> bool:
        changed = False
        for v in module.versions:
            changed |= bool(fold_const_remaps(v.program))
        return changed
