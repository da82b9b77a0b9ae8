"""The workspace toolkit: the person's own files, confined to the ``[workspace] roots``.

Owns: path confinement (``paths``: ``Roots``, ``PathRefused`` — public, reused by other toolkits to
save files), readers that turn files into text (``readers``), and the ``workspace.*`` tasks
(``specs`` is light; ``handlers`` runs only in workers).

May import: ``tether.tasks``, ``tether.config``, ``tether.errors``, ``tether.credentials``; never
execution, agent or interfaces.
"""
