"""Flow files: a plan written by a person, in YAML, validated before anything runs.

```yaml
goal: farm and close
tasks:
  - id: start
    call: {task: demo.start_game}
  - id: farm
    depends_on: [start]
    call:
      task: demo.farm_instance
      args: {instance_type: 拟造花萼（金）, instance_name: 藏珍之蕾, attempts: 3}
  - id: close
    depends_on: [farm]
    call: {task: demo.exit_game}
    review: before
```

``flow.schema.json`` (shipped beside this module) is the same contract as JSON schema, for editors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tether.errors import PlanError
from tether.supervisor.plan import Plan, schema
from tether.supervisor.validate import check
from tether.tasks.spec import Registry

SCHEMA_FILE = Path(__file__).with_name("flow.schema.json")
MAX_FLOW_BYTES = 1_000_000


def _where(loc: tuple[Any, ...], document: Any) -> str:
    """``tasks[2].call.task`` — with the task's id when there is one: ``tasks[2] (farm).call.task``."""
    out = ""
    node = document
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(node, dict) and isinstance(node.get("id"), str):
                out += f" ({node['id']})"
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


def parse(text: str, *, source: str = "flow") -> Plan:
    """A plan from YAML (or JSON) text; ``PlanError`` names every place that is wrong."""
    import yaml

    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise PlanError(f"{source}: not valid YAML{where}: {problem}", problems=[]) from exc
    except RecursionError:
        raise PlanError(f"{source}: nested too deeply", problems=[]) from None
    if not isinstance(document, dict):
        raise PlanError(
            f"{source}: a flow file is a mapping with `tasks:` (and optionally `goal:`)", problems=[]
        )
    try:
        return Plan.model_validate(document)
    except ValidationError as exc:
        found = [
            {
                "task": None,
                "problem": f"{_where(e['loc'], document)}: {e['msg'].removeprefix('Value error, ')}",
            }
            for e in exc.errors(include_url=False)
        ]
        listed = "; ".join(p["problem"] for p in found)
        raise PlanError(f"{source}: {listed}", problems=found) from exc


def load(path: Path, registry: Registry) -> Plan:
    """The checked plan in ``path``."""
    try:
        if path.stat().st_size > MAX_FLOW_BYTES:
            raise PlanError(f"{path}: larger than {MAX_FLOW_BYTES} bytes", problems=[])
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"{path}: cannot be read ({exc})", problems=[]) from exc
    return check(parse(text, source=str(path)), registry)


def schema_text() -> str:
    return json.dumps(schema(), ensure_ascii=False, indent=2, sort_keys=True) + "\n"
