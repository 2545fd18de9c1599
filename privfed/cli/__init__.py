"""The ``privfed`` command line: ``main`` (the entry point and its sub-commands), ``arguments`` (shared argument
checks) and one ``*_command`` module per sub-command, each imported only when its sub-command runs. The top of
the layers: it may import everything below and nothing imports it.
"""
