"""Domain catalogs: the canonical values a parameter may take, and the words people use for them.

A catalog maps each canonical value to its aliases ("藏珍之蕾" ← "金币", "gold", "credits"). A parameter
is tied to a catalog with ``InCatalog`` inside ``Annotated[...]`` on its pydantic field. By default only
canonical values pass: an alias is answered with the canonical value as a suggestion, so the caller (often
a model) learns the right word instead of the system guessing. ``aliases=True`` lets the spec accept and
map aliases itself.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tether.errors import RegistryError


def normalize(text: str) -> str:
    """Fold width, case and spacing: "拟造花萼(金)" matches "拟造花萼（金）", " GOLD " matches "gold"."""
    return "".join(unicodedata.normalize("NFKC", text).casefold().split())


class Catalog:
    """Canonical values with aliases, in a stable order."""

    __slots__ = ("_aliases", "_lookup", "description", "name")

    def __init__(
        self, name: str, values: Mapping[str, Iterable[str]] | Iterable[str], *, description: str = ""
    ):
        self.name = name
        self.description = description
        items = values.items() if isinstance(values, Mapping) else ((value, ()) for value in values)
        self._aliases: dict[str, tuple[str, ...]] = {}
        self._lookup: dict[str, str] = {}
        for canonical, aliases in items:
            if canonical in self._aliases:
                raise RegistryError(f"catalog {name!r}: value {canonical!r} is listed twice")
            self._aliases[canonical] = tuple(aliases)
            for word in (canonical, *aliases):
                key = normalize(word)
                owner = self._lookup.setdefault(key, canonical)
                if owner != canonical:
                    raise RegistryError(
                        f"catalog {name!r}: {word!r} would mean both {owner!r} and {canonical!r}"
                    )
        if not self._aliases:
            raise RegistryError(f"catalog {name!r} is empty")

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(self._aliases)

    def aliases_of(self, value: str) -> tuple[str, ...]:
        return self._aliases.get(value, ())

    def __contains__(self, value: object) -> bool:
        return value in self._aliases

    def resolve(self, word: str) -> str | None:
        """The canonical value ``word`` names (itself, an alias, or a width/case variant), else None."""
        if word in self._aliases:
            return word
        return self._lookup.get(normalize(word))

    def __repr__(self) -> str:
        return f"Catalog({self.name!r}, {len(self._aliases)} values)"


@dataclass(frozen=True, slots=True, kw_only=True)
class InCatalog:
    """Field metadata: the value must be in ``catalog``.

    With ``depends_on``, ``catalog`` is a mapping from the canonical value of that other field to the
    catalog that applies (instance names depend on the instance type).
    """

    catalog: Catalog | Mapping[str, Catalog]
    depends_on: str | None = None
    aliases: bool = False
    label: str = field(default="")

    def __post_init__(self) -> None:
        if self.depends_on is None and not isinstance(self.catalog, Catalog):
            raise RegistryError("InCatalog with a mapping of catalogs needs depends_on=<field name>")
        if self.depends_on is not None and isinstance(self.catalog, Catalog):
            raise RegistryError("InCatalog(depends_on=...) needs a mapping from the other field's values")

    def catalog_for(self, parent_value: object) -> Catalog | None:
        if isinstance(self.catalog, Catalog):
            return self.catalog
        return self.catalog.get(str(parent_value))
