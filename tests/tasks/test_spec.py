import pytest

from tether.errors import RegistryError
from tether.tasks.spec import AGENT, CLI, MCP, Danger, Isolation, Registry, TaskSpec, load_object
from tether.toolkits.demo.registry import registry as demo


def spec(**overrides: object) -> TaskSpec:
    values: dict[str, object] = {"task_id": "x.task", "handler": "x.mod:run"}
    values.update(overrides)
    return TaskSpec(**values)  # type: ignore[arg-type]


def test_defaults_lock_automation_and_expose_nothing() -> None:
    s = spec()
    assert s.resources == ("automation",)
    assert s.exposed_to == frozenset()
    assert s.danger is Danger.SAFE and s.isolation is Isolation.PROCESS


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"task_id": "Bad Id"}, "dotted lowercase"),
        ({"handler": "no_colon"}, "package.module:function"),
        ({"isolation": "inline"}, "inline"),
        ({"isolation": "inline", "resources": (), "danger": "caution"}, "inline"),
        ({"isolation": "inline", "resources": (), "background": True}, "inline"),
        ({"timeout_s": 0}, "positive"),
        ({"resources": ("bad name!",)}, "not a valid"),
        ({"params": dict}, "BaseModel"),
        ({"secrets": ("openai",)}, "credential entry"),  # a model's key is never a task's secret
        ({"secrets": ("mcp.*.x",)}, "credential entry"),
        ({"secrets": ("TETHER_API_KEY",)}, "credential entry"),
    ],
)
def test_bad_specs_are_refused_at_registration(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(RegistryError, match=match):
        spec(**overrides)


def test_inline_is_allowed_for_safe_lockless_tasks() -> None:
    assert spec(isolation="inline", resources=()).isolation is Isolation.INLINE


def test_unexposed_tasks_do_not_exist_for_a_caller() -> None:
    assert demo.get("demo.debug_crash", CLI) is not None
    assert demo.get("demo.debug_crash", AGENT) is None
    assert demo.get("demo.debug_crash", MCP) is None
    assert demo.get("demo.nope", CLI) is None


def test_agent_list_has_no_debug_or_internal_tasks() -> None:
    names = {s.task_id for s in demo.for_caller(AGENT)}
    assert names == {
        "demo.start_game",
        "demo.exit_game",
        "demo.daily_training",
        "demo.farm_instance",
        "demo.loop_farm",
        "demo.salvage_relics",
        "demo.status",
        "jobs.status",  # the two control tasks: every registry has them
        "jobs.stop",
    }
    assert {s.task_id for s in demo.for_caller(MCP)} == names
    internal = Registry()
    internal.add(spec())
    assert {s.task_id for s in internal.for_caller(AGENT)} == {"jobs.status", "jobs.stop"}
    assert internal.get("x.task") is not None


def test_registry_refuses_duplicates_and_unknown_preconditions() -> None:
    registry = Registry()
    registry.add(spec())
    with pytest.raises(RegistryError, match="twice"):
        registry.add(spec())
    with pytest.raises(RegistryError, match="unknown preconditions"):
        registry.add(spec(task_id="x.other", requires=("game_running",)))


def test_load_object_explains_what_is_wrong() -> None:
    with pytest.raises(RegistryError, match="cannot import"):
        load_object("no_such_module_here:x")
    with pytest.raises(RegistryError, match="has no attribute"):
        load_object("tether.errors:Nope")
    with pytest.raises(RegistryError, match="not a tether Registry"):
        Registry.load("tether.errors:TetherError")
    assert Registry.load("tether.toolkits.demo.registry:registry") is demo
