"""Epsilon-versus-accuracy sweeps and reports."""
