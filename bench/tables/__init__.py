"""Every table and figure of docs/results.md, rendered from committed raw results.

Each module of this package registers the tables of one part of docs/results.md with :func:`table` (or
:func:`figure`): a name, the raw-results files it reads, and a function from their parsed contents to Markdown.
In docs/results.md the rendered text sits between two markers, ``<!-- table NAME -->`` and
``<!-- end table NAME -->``, and ends with the command that regenerates it and the provenance of its raw
results. ``python -m bench.tables --check`` renders every registered table, compares it with the text between
the markers and finds any table or figure of the page that has no markers.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import provenance

ROOT = provenance.ROOT
DOCUMENT = ROOT / "docs" / "results.md"

Render = Callable[[list[Any]], str]
Draw = Callable[[list[Any], Path], None]


@dataclass(frozen=True)
class Table:
    """A table of docs/results.md: its name, the raw-results files it reads, how to render it."""

    name: str
    raw: tuple[str, ...]
    render: Render

    def load(self) -> list[Any]:
        """The parsed raw-results files, in the order of :attr:`raw`."""
        return [json.loads((ROOT / path).read_text(encoding="utf-8")) for path in self.raw]

    def block(self) -> str:
        """The Markdown between the markers: the table, then the command and the raw results' provenance."""
        documents = self.load()
        sources = "; ".join(f"`{path}` ({provenance.describe(document)})"
                            for path, document in zip(self.raw, documents, strict=True)
                            if isinstance(document, dict))
        return (self.render(documents).rstrip("\n") + "\n\n"
                + f"<sub>Regenerate: `python -m bench.tables {self.name}`. Raw results: {sources}.</sub>")


@dataclass(frozen=True)
class Figure(Table):
    """A figure of docs/results.md: drawn into :attr:`image` (repository-relative) from its raw results."""

    image: str = ""
    alt: str = ""
    draw: Draw | None = None

    def block(self) -> str:
        sources = "; ".join(f"`{path}`" for path in self.raw)
        return (f"![{self.alt}]({Path(self.image).relative_to('docs')})\n\n"
                f"<sub>Regenerate: `python -m bench.tables {self.name}` (draws `{self.image}`). "
                f"Raw results: {sources}.</sub>")

    def write_image(self) -> Path:
        """Draw the figure into :attr:`image` and return its path."""
        assert self.draw is not None
        path = ROOT / self.image
        self.draw(self.load(), path)
        return path


REGISTRY: dict[str, Table] = {}


def _register(entry: Table) -> None:
    if entry.name in REGISTRY:
        raise ValueError(f"table name {entry.name!r} is registered twice")
    missing = [path for path in entry.raw if not (ROOT / path).is_file()]
    if missing:
        raise ValueError(f"table {entry.name!r}: raw results {missing} are not in the repository")
    REGISTRY[entry.name] = entry


def table(name: str, *, raw: tuple[str, ...] | list[str]) -> Callable[[Render], Render]:
    """Register the decorated function as the renderer of table ``name`` over the files ``raw``."""

    def decorate(render: Render) -> Render:
        _register(Table(name=name, raw=tuple(raw), render=render))
        return render

    return decorate


def figure(name: str, *, raw: tuple[str, ...] | list[str], image: str, alt: str) -> Callable[[Draw], Draw]:
    """Register the decorated function as the drawer of figure ``name`` (``image`` under docs/)."""

    def decorate(draw: Draw) -> Draw:
        _register(Figure(name=name, raw=tuple(raw), render=lambda documents: "", image=image, alt=alt, draw=draw))
        return draw

    return decorate


def load_all() -> dict[str, Table]:
    """Import every module of this package (each registers its tables) and return the registry."""
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    return REGISTRY


_START = re.compile(r"^<!-- (table|figure) ([a-z0-9][a-z0-9_.-]*) -->$")
_END = "<!-- end {kind} {name} -->"
_TABLE_RULE = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")


@dataclass(frozen=True)
class Page:
    """docs/results.md split into its marked blocks and what lies outside them."""

    lines: list[str]
    blocks: dict[str, tuple[int, int]]  # name -> (index of the first line inside, index of the end marker)
    unmarked: list[str]  # one line per table, HTML table or image outside the markers

    @classmethod
    def read(cls, path: Path = DOCUMENT) -> Page:
        return cls.parse(path.read_text(encoding="utf-8"), source=str(path))

    @classmethod
    def parse(cls, text: str, *, source: str) -> Page:
        lines = text.split("\n")
        blocks: dict[str, tuple[int, int]] = {}
        unmarked: list[str] = []
        heading, fenced, index = "(top)", False, 0
        while index < len(lines):
            line = lines[index]
            start = _START.match(line)
            if start and not fenced:
                kind, name = start.groups()
                try:
                    end = lines.index(_END.format(kind=kind, name=name), index + 1)
                except ValueError:
                    raise ValueError(f"{source}: line {index + 1}: {line!r} has no end marker") from None
                if name in blocks:
                    raise ValueError(f"{source}: line {index + 1}: table {name!r} appears twice")
                blocks[name] = (index + 1, end)
                index = end + 1
                continue
            if line.lstrip().startswith("```"):
                fenced = not fenced
            elif not fenced and line.startswith("#"):
                heading = line.lstrip("#").strip()
            elif not fenced and (_TABLE_RULE.match(line) or "<table" in line or line.lstrip().startswith("![")):
                unmarked.append(f"line {index + 1} (under '{heading}'): a table or figure without markers")
            index += 1
        return cls(lines=lines, blocks=blocks, unmarked=unmarked)

    def text_of(self, name: str) -> str:
        """The text between the markers of ``name``, without surrounding blank lines."""
        first, end = self.blocks[name]
        return "\n".join(self.lines[first:end]).strip("\n")

    def with_block(self, name: str, text: str) -> Page:
        """This page with the text between the markers of ``name`` replaced by ``text``."""
        first, end = self.blocks[name]
        return Page.parse("\n".join([*self.lines[:first], *text.split("\n"), *self.lines[end:]]), source="page")

    def text(self) -> str:
        return "\n".join(self.lines)
