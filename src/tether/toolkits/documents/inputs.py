"""What ``documents.generate`` reads besides its arguments: a Markdown file and the pictures it shows,
both confined to the workspace like every workspace tool (no ``..`` out of a root, no link out, never
the tether home — ``Roots`` refuses them) and bounded in size.

Pictures are opened with Pillow (a decompression bomb is refused by its pixel limit), kept as PNG,
JPEG or GIF and otherwise converted to PNG, and written to a private temporary folder the builders
read from. A picture at a web address is read through the research toolkit's SSRF guard, as
``web.read_url`` reads a page (public addresses only, or ``[research] allow_hosts``; bounded in bytes and
time): it reaches nothing ``web.read_url`` could not. Without research settings that allow it, or when it
cannot be read, its alt text stands in and the result says why.
"""

from __future__ import annotations

import io
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tether.errors import ConfigError, TaskFailed, TetherError

MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGES = 60
MAX_IMAGE_PIXELS = 50_000_000
KEPT_FORMATS = {"PNG": ".png", "JPEG": ".jpg", "GIF": ".gif"}
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def read_markdown(roots: object, path: str, limit_chars: int) -> str:
    """The text of a workspace Markdown file, ``TaskFailed`` naming the limit when it is longer."""
    located, data, size = roots.read_bytes(path, limit=limit_chars * 4 + 4)  # type: ignore[attr-defined]
    del located
    text = data.decode("utf-8", errors="replace")
    if size > limit_chars * 4 + 4 or len(text) > limit_chars:
        raise TaskFailed(
            f"{path} is {max(len(text), size // 4)}+ characters of Markdown; the limit is {limit_chars} "
            "(MAX_MARKDOWN_CHARS): split it into several documents",
            limit=limit_chars,
        )
    return text


@dataclass(slots=True)
class ImageFinder:
    """``resolve(src)``: a picture of the workspace as a checked local file, or None (and why)."""

    roots: object
    folder: Path  # private temporary folder the checked pictures are written to
    base: str = ""  # the Markdown file's folder: relative pictures are looked for there first
    # A web picture's bytes and whether it went on past the limit, read through the SSRF guard
    # (``web_reader``); None: web pictures are not read.
    fetch: Callable[[str], tuple[bytes, bool]] | None = None
    drawn: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)

    def resolve(self, src: str) -> str | None:
        if len(self.drawn) >= MAX_IMAGES:
            self.missing[src] = f"more than {MAX_IMAGES} pictures"
            return None
        if src.startswith(("http://", "https://")):
            return self._from_web(src)
        if _SCHEME.match(src) or src.startswith("//") or not src.strip():
            self.missing[src] = "only pictures in the workspace or at an http(s) address are drawn"
            return None
        path = unquote(urlsplit(src).path)
        candidates = [posixpath.join(self.base, path)] if self.base and not path.startswith("/") else []
        for candidate in [*candidates, path]:
            found = self._load(candidate)
            if found is not None:
                self.drawn.append(src)
                return found
        self.missing.setdefault(src, "not found in the workspace")
        return None

    def _from_web(self, src: str) -> str | None:
        if self.fetch is None:
            self.missing[src] = "web pictures are read only where web.read_url may read ([research] settings)"
            return None
        try:
            data, cut = self.fetch(src)
        except TetherError as exc:
            self.missing[src] = str(exc)[:300]
            return None
        found = self._accept(src, data, MAX_IMAGE_BYTES + 1 if cut else len(data))
        if found is not None:
            self.drawn.append(src)
        return found

    def _load(self, path: str) -> str | None:
        try:
            _, data, size = self.roots.read_bytes(path, limit=MAX_IMAGE_BYTES + 1)  # type: ignore[attr-defined]
        except TetherError as exc:
            if getattr(exc, "code", "") == "path_refused" and "outside" in str(exc):
                self.missing[path] = str(exc)
            return None
        return self._accept(path, data, size)

    def _accept(self, path: str, data: bytes, size: int) -> str | None:
        """The picture checked by Pillow and written to the private folder, or None (and why)."""
        from PIL import Image, UnidentifiedImageError

        if size > MAX_IMAGE_BYTES:
            self.missing[path] = f"larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB"
            return None
        Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
        try:
            with Image.open(io.BytesIO(data)) as picture:
                picture.load()
                suffix = KEPT_FORMATS.get(picture.format or "")
                target = self.folder / f"image-{len(self.drawn)}{suffix or '.png'}"
                if suffix is not None:
                    target.write_bytes(data)
                else:
                    picture.convert("RGBA").save(target, "PNG")
        except (OSError, UnidentifiedImageError, Image.DecompressionBombError, ValueError):
            self.missing[path] = "not a picture Pillow can read"
            return None
        return str(target)


def web_reader(home: Path) -> tuple[Callable[[str], tuple[bytes, bool]] | None, Callable[[], None]]:
    """(read a web picture's bytes through the SSRF guard, close it); (None, …) when the research
    settings cannot make a guard here. A body that is not an image, or too large, is refused."""
    from tether.config import ResearchSettings
    from tether.toolkits.web.fetch import Fetcher, Limits
    from tether.toolkits.web.guard import Policy

    try:
        settings = ResearchSettings.load(home)
        policy = Policy.from_settings(settings)
    except ConfigError:
        return None, lambda: None
    limits = Limits(
        max_bytes=min(settings.fetch_max_bytes, MAX_IMAGE_BYTES + 1),
        timeout_s=settings.fetch_timeout_s,
        max_redirects=settings.fetch_max_redirects,
    )
    fetcher = Fetcher(policy, limits)

    def read(url: str) -> tuple[bytes, bool]:
        fetched = fetcher.fetch(url)
        if not fetched.content_type.startswith("image/"):
            raise TaskFailed(f"{url[:200]} is not a picture ({fetched.content_type or 'no content type'})")
        return fetched.body, fetched.truncated

    return read, fetcher.close
