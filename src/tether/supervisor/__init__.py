"""The supervisor: goals and flow files become plans (DAGs of tasks), checked before they run, and a
durable engine on DBOS drives each to its end.

``plan`` (the data), ``validate`` (every problem, named), ``flowfile`` (YAML flow files and their JSON
schema), ``goals`` and ``planner`` (a goal → a plan, offline or by a model), ``policies`` (the schedule
and the failure chain, as data, pure). The engine (``engine``: DBOS workflows and steps, executor
processes only) runs with ``host`` (the executor this process is), ``reading`` (what it reads of a run
and writes back), ``attempts`` (one call through the executor) and ``turns`` (an agent task's turn as
steps); ``durable`` keeps DBOS behind one module; ``service``, ``runner`` and ``conversations`` are what
other processes call.
"""
