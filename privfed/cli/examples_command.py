"""``privfed examples DIR``: write the example files shipped inside the package.

The wheel carries the examples as package data (``privfed.examples``: vote matrices,
a mechanism file, sweep configurations, claims files), so that the README's commands
work from an empty folder with only the wheel installed::

    privfed examples ex
    privfed account ex/votes.npy --gamma 0.04 --delta 1e-5

Existing files are never replaced unless ``--overwrite`` is given; every path is
checked before the first file is written.
"""

from __future__ import annotations

import argparse
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath

from privfed.cli.arguments import EXIT_OK
from privfed.output_folder import check_output_folder

__all__ = ["add_examples_command", "example_files", "write_examples"]

#: The package whose files are the examples.
EXAMPLES_PACKAGE = "privfed.examples"
_SKIPPED = ("__init__.py", "__pycache__")


def example_files() -> dict[PurePosixPath, Traversable]:
    """Relative path → resource of every example file shipped in :data:`EXAMPLES_PACKAGE`."""
    found: dict[PurePosixPath, Traversable] = {}

    def walk(folder: Traversable, prefix: PurePosixPath) -> None:
        for item in folder.iterdir():
            if item.name in _SKIPPED or item.name.endswith(".pyc"):
                continue
            if item.is_dir():
                walk(item, prefix / item.name)
            else:
                found[prefix / item.name] = item

    walk(resources.files(EXAMPLES_PACKAGE), PurePosixPath())
    return dict(sorted(found.items()))


def write_examples(directory: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Write every example file into ``directory`` (created if needed); returns the paths written.

    Raises
    ------
    ValueError
        ``directory`` is a file or not writable, or (without ``overwrite``) one of the
        files already exists; nothing is written then.
    """
    directory = check_output_folder(directory, "DIR", overwrite=None)
    files = example_files()
    if not overwrite:
        existing = [directory / relative for relative in files if (directory / relative).exists()]
        if existing:
            raise ValueError(f"DIR: {str(existing[0])!r} already exists; pass --overwrite to replace the example files")
    written = []
    for relative, resource in files.items():
        target = directory.joinpath(*relative.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(resource.read_bytes())
        written.append(target)
    return written


def _examples_command(args: argparse.Namespace) -> int:
    written = write_examples(args.directory, overwrite=args.overwrite)
    root = Path(args.directory)
    print(f"wrote {len(written)} example files to {root}:")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: privfed account {root / 'votes.npy'} --gamma 0.04 --votes-per-unit 2 --unit party --delta 1e-5")
    return EXIT_OK


def add_examples_command(commands: argparse._SubParsersAction) -> None:
    """Register ``privfed examples``."""
    parser = commands.add_parser(
        "examples", help="write the example files (votes, mechanism file, sweep configs, claims) into a folder",
        description="Write the example files shipped in the package into DIR (created if needed): votes.npy, "
                    "pipeline.toml, the report_*.toml sweep configurations and claims/*.json. Existing files are "
                    "kept unless --overwrite is given.",
        epilog="example:\n"
               "  privfed examples ex && privfed account ex/votes.npy --gamma 0.04 --delta 1e-5\n\n"
               "exit codes: 0 ok, 2 bad input (DIR is a file, not writable, or holds the files already)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", metavar="DIR", help="folder to write the examples into")
    parser.add_argument("--overwrite", action="store_true", help="replace example files already in DIR")
    parser.set_defaults(handler=_examples_command)
