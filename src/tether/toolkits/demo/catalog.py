"""The demo's domain catalogs, modelled on the game-automation seed: instance types, their instances,
and the words players use for them, in Chinese and English."""

from __future__ import annotations

from tether.tasks.catalog import Catalog

CALYX_GOLD = "拟造花萼（金）"
CALYX_CRIMSON = "拟造花萼（赤）"
SHADOW = "凝滞虚影"
CAVERN = "侵蚀隧洞"
ECHO = "历战余响"

INSTANCE_TYPES = Catalog(
    "instance_type",
    {
        CALYX_GOLD: ("金花", "金色花萼", "golden calyx", "calyx golden", "calyx (golden)", "gold calyx"),
        CALYX_CRIMSON: ("红花", "赤色花萼", "crimson calyx", "calyx crimson", "calyx (crimson)", "red calyx"),
        SHADOW: ("boss材料", "突破材料", "stagnant shadow", "shadow"),
        CAVERN: ("遗器副本", "隧洞", "cavern of corrosion", "cavern", "relic dungeon"),
        ECHO: ("周本", "echo of war", "weekly boss"),
    },
    description="Kinds of instance that can be farmed",
)

INSTANCE_NAMES: dict[str, Catalog] = {
    CALYX_GOLD: Catalog(
        "instance_name",
        {
            "回忆之蕾": (
                "经验",
                "经验书",
                "角色经验",
                "exp",
                "character exp",
                "experience",
                "bud of memories",
            ),
            "以太之蕾": ("光锥经验", "光锥", "light cone exp", "bud of aether"),
            "藏珍之蕾": ("金币", "信用点", "钱", "gold", "credits", "credit", "money", "bud of treasures"),
        },
    ),
    CALYX_CRIMSON: Catalog(
        "instance_name",
        {
            "毁灭之蕾": ("毁灭", "destruction", "bud of destruction"),
            "存护之蕾": ("存护", "preservation", "bud of preservation"),
            "巡猎之蕾": ("巡猎", "the hunt", "hunt", "bud of the hunt"),
            "丰饶之蕾": ("丰饶", "abundance", "bud of abundance"),
            "智识之蕾": ("智识", "erudition", "bud of erudition"),
            "同谐之蕾": ("同谐", "harmony", "bud of harmony"),
            "虚无之蕾": ("虚无", "nihility", "bud of nihility"),
        },
    ),
    SHADOW: Catalog(
        "instance_name",
        {
            "空海之形": ("量子", "quantum", "shape of quanta"),
            "巽风之形": ("风", "wind", "shape of gust"),
            "鸣雷之形": ("雷", "lightning", "shape of fulmination"),
            "炎华之形": ("火", "fire", "shape of blaze"),
            "锋芒之形": ("物理", "physical", "shape of spike"),
            "霜晶之形": ("冰", "ice", "shape of rime"),
            "幻光之形": ("虚数", "imaginary", "shape of mirage"),
        },
    ),
    CAVERN: Catalog(
        "instance_name",
        {
            "霜风之径": ("霜风", "path of gelid wind"),
            "迅拳之径": ("迅拳", "path of jabbing punch"),
            "漂泊之径": ("漂泊", "path of drifting"),
            "睿治之径": ("睿治", "path of providence"),
        },
    ),
    ECHO: Catalog(
        "instance_name",
        {
            "毁灭的开端": ("开端", "destruction's beginning"),
            "寒潮的落幕": ("寒潮", "end of the eternal freeze"),
            "不死的神实": ("神实", "divine seed"),
        },
    ),
}

# How many relics one salvage of each rarity breaks down; five-star relics are never salvaged.
SALVAGE_COUNTS = {2: 8, 3: 5, 4: 2}
