"""The import graph, read from the source: no import cycles, and the layers import only downwards.

Every ``import`` and ``from … import`` statement counts, wherever it stands: at module level, inside a
function, under ``if TYPE_CHECKING``. A function-level import that dodges a circle is still a circle
(../shared/STYLE.md, "Registries without circles"). Imports computed at run time
(``importlib.import_module(name)``, the lazy tables of the packages' ``__init__``) are not seen.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The layers from the bottom up, with the import package each folder is installed as (pyproject.toml's package-dir).
LAYERS = {"accounting": "privfed.accounting", "pipelines": "privfed.pipelines", "reports": "privfed.reports",
          "privfed": "privfed"}


def _modules() -> dict[str, tuple[str, Path]]:
    """``{module name: (layer, path)}`` for every module of the four layers."""
    modules = {}
    for layer, package in LAYERS.items():
        for path in sorted((REPO_ROOT / layer).rglob("*.py")):
            parts = path.relative_to(REPO_ROOT / layer).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = (layer, path)
    return modules


MODULES = _modules()


def _known(name: str) -> str | None:
    """The module ``name`` loads from the four layers: itself, or its closest enclosing package; None if outside."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import statement anywhere in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # `from package import name` loads the submodule package.name when there is one.
            targets = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            known = _known(target)
            if known is not None and known != module:
                yield known, node.lineno


GRAPH = {module: sorted(set(_imports(module, path))) for module, (_, path) in MODULES.items()}


def _cycles(modules: set[str]) -> list[list[str]]:
    """The strongly connected components of more than one module among ``modules`` (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target, _ in GRAPH[module]:
            if target not in modules:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return components


def _describe(component: list[str]) -> str:
    edges = [f"{module} -> {target} (line {line})" for module in component for target, line in GRAPH[module]
             if target in component]
    return "; ".join(edges)


def test_the_graph_sees_module_and_function_level_imports(tmp_path):
    """The reader itself: relative, absolute, package and function-level imports are all edges."""
    assert {"privfed.accounting.registry", "privfed.pipelines.fedkt.estimator", "privfed.reports.sweep",
            "privfed.cli.command_line", "privfed.federation.server_app"} <= set(MODULES)
    source = tmp_path / "probe.py"
    source.write_text("import numpy\nfrom .mechanism import Mechanism\nfrom .. import pipelines\n"
                      "def late():\n    from privfed.reports.sweep import run_sweep\n"
                      "    import privfed.cli.command_line\n    from . import spec\n    from .. import account\n")
    found = {target for target, _ in _imports("privfed.accounting.probe", source)}
    assert found == {"privfed.accounting.mechanism", "privfed.pipelines", "privfed.reports.sweep",
                     "privfed.cli.command_line", "privfed.accounting.spec", "privfed"}
    assert any(target == "privfed.audit" for target, _ in GRAPH["privfed.bundle.model_signature"])  # inside a function


@pytest.mark.parametrize("layer", list(LAYERS))
def test_no_import_cycles_inside_a_layer(layer):
    cycles = _cycles({module for module, (owner, _) in MODULES.items() if owner == layer})
    assert not cycles, "import cycles: " + " | ".join(_describe(component) for component in cycles)


def test_layers_import_only_downwards():
    """accounting ← pipelines ← reports ← privfed: a module imports from its own layer or one below."""
    rank = {layer: position for position, layer in enumerate(LAYERS)}
    upward = [f"{module} -> {target} (line {line})" for module, edges in GRAPH.items() for target, line in edges
              if rank[MODULES[target][0]] > rank[MODULES[module][0]]]
    assert not upward, upward


#: Inside pipelines: which sub-packages each may import (besides itself and the accounting layer). The shared pieces
#: stack protocol ← data ← models, and each pipeline builds on those three, never on another pipeline.
PIPELINE_PARTS = {"protocol": set(), "data": {"protocol"}, "models": {"protocol", "data"}}
PIPELINE_PARTS |= {pipeline: {"protocol", "data", "models"}
                   for pipeline in ("fedkt", "fedkd", "privatekt", "selective_fd")}


def _part(module: str, package: str) -> str | None:
    """The sub-package of ``package`` that ``module`` belongs to; None for ``package`` itself or outside it."""
    prefix = package + "."
    return module[len(prefix):].split(".")[0] if module.startswith(prefix) else None


def test_pipelines_sub_packages_import_only_what_they_build_on():
    """protocol imports no other sub-package; data only protocol; models only protocol and data; a pipeline
    (fedkt, fedkd, privatekt, selective_fd) only protocol, data and models."""
    parts = {_part(module, "privfed.pipelines") for module in MODULES} - {None}
    assert parts == set(PIPELINE_PARTS), "a new sub-package of pipelines: give it its allowed imports here"
    wrong = [f"{module} -> {target} (line {line})" for module, edges in GRAPH.items() for target, line in edges
             if (part := _part(module, "privfed.pipelines")) is not None
             and (imported := _part(target, "privfed.pipelines")) not in (None, part)
             and imported not in PIPELINE_PARTS[part]]
    assert not wrong, wrong


def test_the_command_line_is_the_top_and_bundles_never_import_it():
    """privfed.cli is imported by nothing outside it except ``python -m privfed`` (privfed/__main__.py);
    privfed.bundle does not import the command line."""
    importers = {module for module, edges in GRAPH.items() for target, _ in edges
                 if _part(target, "privfed") == "cli" and _part(module, "privfed") != "cli"}
    assert importers == {"privfed.__main__"}, importers
    assert not [(module, target) for module, edges in GRAPH.items() for target, _ in edges
                if _part(module, "privfed") == "bundle" and _part(target, "privfed") == "cli"]
