"""The supervisor: goals and flow files become plans (DAGs of tasks) that are checked before they run.

``plan`` (the data), ``validate`` (every problem, named), ``flowfile`` (YAML flow files and their JSON
schema), ``goals`` (a goal → a plan with the offline model). The durable engine that drives a plan to its
end (DBOS) builds on these.
"""
