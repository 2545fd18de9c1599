"""The ``privfed`` command line: :func:`main` (``command_line``: the entry point, its parser and the dispatch to
the sub-commands), ``arguments`` (exit codes and shared argument checks) and one ``*_command`` module per
sub-command (``demo_command``: ``privfed demo``), whose work is imported only when its sub-command runs. The top of
the layers: it may import everything below, and nothing but ``privfed/__main__.py`` imports it.
"""

from .command_line import main

__all__ = ["main"]
