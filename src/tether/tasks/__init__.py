"""Tasks: what can be executed, with which parameters, and what a result looks like.

Owns ``TaskSpec`` and ``Registry`` (spec.py), ``TaskStatus`` and ``TaskResult`` (result.py), and domain
catalogs (catalog.py). Imports only ``tether.errors`` and pydantic; never execution, agents or stores.
"""
