"""Starting a skill's flow for an agent (``skills.run``, ``agent/skillruns.py``): read the skill's
``flow.yaml``, make it run as the agent's caller and within its grants, validate it and start it."""

from __future__ import annotations

from typing import Any

from tether.errors import ConfigError
from tether.runtime import Runtime
from tether.tasks.grants import Grants
from tether.tasks.spec import Registry

FLOW_FILE = "flow.yaml"


def start_skill_flow(
    runtime: Runtime,
    registry: Registry,
    skill: str,
    inputs: dict[str, Any],
    caller: str,
    grants: Grants | None,
    run_id: str,
    chain: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The run of ``skill``'s flow (the one already started under ``run_id``, if any)."""
    from tether.supervisor import flowfile, service
    from tether.toolkits.skills.library import SkillLibrary

    known = runtime.runs.get(run_id)
    if known is not None:  # a replayed step: the run it started
        return {"run_id": run_id, "status": known.status}
    library = SkillLibrary(runtime.home)
    found = library.get(skill)
    if found is None or FLOW_FILE not in found.resources:
        with_flows = [n for n in library.names() if FLOW_FILE in getattr(library.get(n), "resources", ())]
        raise ConfigError(
            f"no skill {skill!r} with a flow; skills that run: {', '.join(with_flows) or 'none'}"
        )
    try:
        text = library.read(skill, FLOW_FILE)
    except KeyError as exc:
        raise ConfigError(str(exc.args[0])) from exc
    plan = flowfile.parse(text, source=f"skill {skill}")
    # The run is the agent's: its caller everywhere (never a wider one the file names), its grants.
    profiles = {name: p.model_copy(update={"caller": caller}) for name, p in plan.profiles.items()}
    plan = plan.model_copy(
        update={
            "caller": caller,
            "profiles": profiles,
            "grants": None if grants is None else grants.to_json(),
            "chain": list(chain),  # a skill is no way around delegation's depth and loop checks
            "context": {**plan.context, **inputs},
        }
    )
    record = service.start(runtime, registry, plan, run_id=run_id)
    return {"run_id": record.run_id, "status": record.status}
