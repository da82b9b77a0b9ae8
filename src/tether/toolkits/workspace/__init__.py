"""The workspace toolkit: the person's own files, confined to the ``[workspace] roots``.

Owns: path confinement (``paths``: ``Roots``, ``PathRefused`` — public, reused by other toolkits to
save files; the tether home below a root stays out of reach; the checks and the descriptor walk under
it are ``confine``), readers that turn files into text
(``readers``), what a call waiting for consent would touch, for the person's question (``impact``, light:
it runs where the question is asked), and the ``workspace.*`` tasks (``specs`` is light; ``handlers``
runs only in workers).

May import: ``tether.tasks``, ``tether.config``, ``tether.errors``, ``tether.credentials``; never
execution, agent or interfaces.
"""
