import pytest

from tether.errors import RegistryError
from tether.tasks.catalog import Catalog, InCatalog, normalize
from tether.toolkits.demo.catalog import CALYX_GOLD, INSTANCE_NAMES, INSTANCE_TYPES


def test_aliases_resolve_in_both_languages_and_any_width_or_case() -> None:
    names = INSTANCE_NAMES[CALYX_GOLD]
    assert names.resolve("金币") == "藏珍之蕾"
    assert names.resolve(" Gold ") == "藏珍之蕾"
    assert names.resolve("藏珍之蕾") == "藏珍之蕾"
    assert INSTANCE_TYPES.resolve("拟造花萼(金)") == CALYX_GOLD
    assert names.resolve("diamonds") is None


def test_only_canonical_values_are_members() -> None:
    names = INSTANCE_NAMES[CALYX_GOLD]
    assert "藏珍之蕾" in names
    assert "金币" not in names
    assert names.values == ("回忆之蕾", "以太之蕾", "藏珍之蕾")


def test_an_alias_cannot_mean_two_values() -> None:
    with pytest.raises(RegistryError, match="would mean both"):
        Catalog("x", {"a": ("same",), "b": ("SAME",)})


def test_empty_and_duplicate_catalogs_are_refused() -> None:
    with pytest.raises(RegistryError, match="empty"):
        Catalog("x", {})


def test_dependent_catalog_needs_its_field_name() -> None:
    with pytest.raises(RegistryError, match="depends_on"):
        InCatalog(catalog=INSTANCE_NAMES)
    with pytest.raises(RegistryError, match="mapping"):
        InCatalog(catalog=INSTANCE_TYPES, depends_on="instance_type")


def test_normalize_folds_fullwidth_and_spaces() -> None:
    assert normalize("ＡＢ Ｃ") == "abc"
