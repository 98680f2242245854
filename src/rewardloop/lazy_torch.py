"""torch, imported at its first use rather than at import time.

The training objectives (``rewardloop.objectives``) and the recorded steps they read are imported by
every ``snakemake`` command, dry runs included, for their declarations only (``train.loss``'s training
signal, the adapters a model holds, the config keys that moved): importing torch with them cost 1.7 s
of each command's startup (issue 33, docs/performance.md). Those modules bind ``torch`` (and
``torch.nn.functional``) to a :class:`LazyModule`, which imports the real module at the first attribute
read and forwards every read to it (a patched attribute of torch is seen; nothing is copied).
"""

from __future__ import annotations

import functools
import importlib
import types


class LazyModule(types.ModuleType):
    """A stand-in for the module ``name``: any attribute read imports it (once) and reads it there."""

    def __init__(self, name: str):
        super().__init__(name)
        self.__dict__["_module"] = None

    def __getattr__(self, attr: str):
        module = self.__dict__["_module"]
        if module is None:
            module = importlib.import_module(self.__name__)
            self.__dict__["_module"] = module
        return getattr(module, attr)

    def __dir__(self):
        return dir(importlib.import_module(self.__name__))


torch = LazyModule("torch")
functional = LazyModule("torch.nn.functional")


def no_grad(function):
    """``@torch.no_grad()`` for a plain function or method of such a module: torch is imported at its first call."""

    @functools.wraps(function)
    def without_gradients(*args, **kwargs):
        with torch.no_grad():
            return function(*args, **kwargs)

    return without_gradients
