"""Toolkits: the task handlers themselves, and the registries that describe them.

A toolkit module may import ``tether.tasks`` (specs, catalogs, the ``TaskContext`` protocol) and
``tether.errors``; never execution, agents or interfaces. Handlers are imported only inside workers.
"""
