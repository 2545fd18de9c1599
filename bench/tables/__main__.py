"""``python -m bench.tables NAME ...`` prints tables of docs/results.md; ``--check`` compares all with the page.

Exit status: 0 when every table matches (``--check``), 1 when a table differs, a table has no raw results or
a table or figure of the page has no markers, 2 on a bad argument.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys

from bench.tables import DOCUMENT, Figure, Page, load_all


def _arguments(names: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tables", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="tables to render (default with --check: all)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="compare the rendered tables with docs/results.md")
    action.add_argument("--write", action="store_true", help="write the rendered tables into docs/results.md")
    action.add_argument("--list", action="store_true", help="list the registered tables and their raw results")
    arguments = parser.parse_args(names)
    unknown = [name for name in arguments.names if name not in registry]
    if unknown:
        parser.error(f"NAME: unknown table(s) {', '.join(unknown)}; valid: {', '.join(sorted(registry))}")
    return arguments


def _check(page: Page, names: list[str], *, whole_page: bool) -> int:
    differing: list[str] = []
    for name in names:
        if name not in page.blocks:
            differing.append(f"{name}: registered but docs/results.md has no '<!-- table {name} -->' block")
            continue
        rendered, written = registry[name].block(), page.text_of(name)
        if rendered != written:
            diff = difflib.unified_diff(written.split("\n"), rendered.split("\n"), "docs/results.md", "rendered",
                                        lineterm="", n=1)
            differing.append(f"{name}: differs from its raw results\n" + "\n".join(diff))
    problems = list(differing)
    if whole_page:
        problems += [f"{name}: in docs/results.md but not registered" for name in page.blocks if name not in registry]
        problems += page.unmarked
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"{len(names) - len(differing)} of {len(names)} tables match their raw results; {len(problems)} problem(s)")
    return 1 if problems else 0


def _write(page: Page, names: list[str]) -> None:
    for name in names:
        entry = registry[name]
        if isinstance(entry, Figure):
            print(f"drew {entry.write_image()}")
        page = page.with_block(name, entry.block())
    temporary = DOCUMENT.with_name(DOCUMENT.name + ".tmp")
    temporary.write_text(page.text(), encoding="utf-8")
    os.replace(temporary, DOCUMENT)
    print(f"wrote {len(names)} table(s) into {DOCUMENT}")


def main(argv: list[str] | None = None) -> int:
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    if arguments.list:
        for name, entry in sorted(registry.items()):
            print(f"{name}: {', '.join(entry.raw)}")
        return 0
    page = Page.read(DOCUMENT)
    names = arguments.names or sorted(registry)
    if arguments.check:
        return _check(page, names, whole_page=not arguments.names)
    if arguments.write:
        missing = [name for name in names if name not in page.blocks]
        if missing:
            print(f"NAME: docs/results.md has no block for {', '.join(missing)}; add "
                  f"'<!-- table NAME -->' and '<!-- end table NAME -->' lines first", file=sys.stderr)
            return 2
        _write(page, names)
        return 0
    for name in names:
        entry = registry[name]
        print(f"drew {entry.write_image()}" if isinstance(entry, Figure) else entry.block(), end="\n\n")
    return 0


registry = load_all()

if __name__ == "__main__":
    sys.exit(main())
