"""skops imported without torch: the one way privfed imports ``skops.io``.

Importing ``skops.io`` builds its default trusted-type list from scikit-learn's
``all_estimators()``, which walks every scikit-learn package with
``pkgutil.walk_packages`` and so imports each one it meets, among them the
vendored ``sklearn.externals.array_api_compat.torch``, which imports torch
(≈ 1.3 CPU s, the larger part of auditing a tree bundle). ``all_estimators``
skips ``externals`` itself, so nothing in that list comes from the package:
:func:`import_skops_io` declines that one package for the duration of the import
(``walk_packages`` ignores a package that cannot be imported), leaving skops,
scikit-learn and torch untouched. scikit-learn imports the package again, on
its own, the first time it is handed a torch tensor.
"""

from __future__ import annotations

import importlib.abc
import sys
from types import ModuleType

__all__ = ["import_skops_io"]

#: The package that scikit-learn's estimator walk would import only to import torch.
_TORCH_NAMESPACE = "sklearn.externals.array_api_compat.torch"


class _DeclineTorchNamespace(importlib.abc.MetaPathFinder):
    """A finder that refuses :data:`_TORCH_NAMESPACE` and its submodules; defers every other name."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == _TORCH_NAMESPACE or fullname.startswith(_TORCH_NAMESPACE + "."):
            raise ModuleNotFoundError(f"{fullname} is not imported while skops.io builds its type list",
                                      name=fullname)
        return None


def import_skops_io() -> ModuleType:
    """``skops.io``, imported (the first time) without importing torch.

    Returns
    -------
    types.ModuleType
        The ``skops.io`` module.
    """
    module = sys.modules.get("skops.io")
    if module is not None:
        return module
    finder = _DeclineTorchNamespace()
    sys.meta_path.insert(0, finder)
    try:
        import skops.io
    finally:
        sys.meta_path.remove(finder)
    return skops.io
