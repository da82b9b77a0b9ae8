import json

from tether.agent.surface import CONTROL_TOOLS, GET_STATUS, STOP_TASK, ToolSurface, tool_name
from tether.toolkits.demo.registry import registry


def test_surface_has_the_exposed_tasks_and_the_control_tools() -> None:
    surface = ToolSurface(registry, "agent")
    names = [t.name for t in surface.tools]
    assert "demo__debug_crash" not in names and "demo__debug_hang" not in names
    assert names[-2:] == [GET_STATUS, STOP_TASK]
    assert all(t.kind == "control" for t in CONTROL_TOOLS)
    assert surface.task_id("demo__farm_instance") == "demo.farm_instance" and tool_name("a.b") == "a__b"
    assert ToolSurface(registry, "cli").spec("demo__debug_crash") is not None


def test_schemas_carry_catalog_enums_ranges_and_policy() -> None:
    tools = {t.name: t for t in ToolSurface(registry, "agent").tools}
    farm = tools["demo__farm_instance"].openai()["function"]
    props = farm["parameters"]["properties"]
    assert props["instance_type"]["enum"][0] == "拟造花萼（金）"
    assert "藏珍之蕾 (金币" in props["instance_name"]["description"]  # aliases told to remote models
    assert props["attempts"]["minimum"] == 1 and props["attempts"]["maximum"] == 99
    assert farm["parameters"]["additionalProperties"] is False
    assert "DESTRUCTIVE" in tools["demo__salvage_relics"].description
    assert "background" in tools["demo__loop_farm"].description and tools["demo__loop_farm"].background
    assert tools["demo__salvage_relics"].openai()["function"]["parameters"]["properties"]["rarity"][
        "enum"
    ] == [2, 3, 4]
    json.dumps([t.openai() for t in tools.values()], ensure_ascii=False)  # serializable as sent
