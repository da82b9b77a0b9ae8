"""Stands for a heavy library a one-function task imports in its body: only its worker may import it."""

IMPORTED = True
