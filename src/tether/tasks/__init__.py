"""Tasks: what can be executed, with which parameters, and what a result looks like.

Owns ``TaskSpec`` and ``Registry`` (spec.py), the callers' names (callers.py: no pydantic), ``TaskStatus``
and ``TaskResult`` (result.py), domain catalogs (catalog.py), parameter validation (validation.py), the
handler's ``TaskContext`` (context.py) and the person's ``Confirmation`` of one call (confirm.py).
Imports only ``tether.errors`` and pydantic; never execution, agents or stores: it is the vocabulary they
share.
"""
