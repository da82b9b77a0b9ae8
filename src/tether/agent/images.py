"""Images a person sends with a message: checked, kept in the home, and shown to models that can see.

An image is recognised by its bytes (PNG, JPEG, GIF or WebP; the file's name and claimed type are not
trusted), at most ``MAX_BYTES`` each and ``MAX_IMAGES`` per message, and kept once under
``<home>/images/<sha256>.<ext>`` (private). A message on record names its images by digest
(``{"role": "user", "content": text, "images": [{"sha256", "mime", "size"}]}``), so the thread stays small
and its text is read as before by everything that reads text. What a model is sent is decided when it is
asked (``for_model``): image parts (data URLs) for a model that accepts them (``supports_images``, e.g.
``[model].images = true``), the text alone and a note for one that does not. A turn whose own images a
model cannot see is answered in plain words, and nothing runs (``agent/session.py``).
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tether.errors import ConfigError
from tether.models.base import Message

MAX_IMAGES = 4
MAX_BYTES = 5 * 1024 * 1024
IMAGES_DIR = "images"
KINDS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


def sniff(data: bytes) -> str | None:
    """The image type ``data`` is, by its first bytes; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def check(data: bytes, name: str = "the image") -> str:
    """The image's type; ``ConfigError`` names what is allowed when it is no image or too big."""
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{name} is {len(data):,} bytes: an image may be at most {MAX_BYTES:,} bytes")
    mime = sniff(data)
    if mime is None:
        raise ConfigError(f"{name} is not an image tether takes: send PNG, JPEG, GIF or WebP")
    return mime


def save(home: Path, data: bytes, name: str = "the image") -> dict[str, Any]:
    """Keep one image in the home (once per content); its reference, as a message names it."""
    mime = check(data, name)
    digest = hashlib.sha256(data).hexdigest()
    folder = home / IMAGES_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{digest}.{KINDS[mime]}"
    if not path.exists():
        temp = folder / f".{digest}.{os.getpid()}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    return {"sha256": digest, "mime": mime, "size": len(data)}


def save_all(home: Path, images: Sequence[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """Every image of one message, checked and kept; too many is a ``ConfigError`` before any is kept."""
    if len(images) > MAX_IMAGES:
        raise ConfigError(f"{len(images)} images: a message may carry at most {MAX_IMAGES}")
    for name, data in images:
        check(data, name)
    return [save(home, data, name) for name, data in images]


def refs(value: object) -> list[dict[str, Any]]:
    """Image references as a request carries them, checked: digests of images kept in this home."""
    if not value:
        return []
    if not isinstance(value, list) or len(value) > MAX_IMAGES:
        raise ConfigError(f"images: a list of at most {MAX_IMAGES} image references")
    out = []
    for item in value:
        if not (
            isinstance(item, dict)
            and isinstance(item.get("sha256"), str)
            and len(item["sha256"]) == 64
            and all(c in "0123456789abcdef" for c in item["sha256"])
            and item.get("mime") in KINDS
        ):
            raise ConfigError("images: each is {sha256, mime} of an image sent with the message")
        out.append({"sha256": item["sha256"], "mime": item["mime"], "size": int(item.get("size") or 0)})
    return out


def _path(home: Path, ref: dict[str, Any]) -> Path:
    return home / IMAGES_DIR / f"{ref['sha256']}.{KINDS[ref['mime']]}"


def data_url(home: Path, ref: dict[str, Any]) -> str | None:
    """The image as a data URL, or None when its file is gone."""
    try:
        data = _path(home, ref).read_bytes()
    except OSError:
        return None
    return f"data:{ref['mime']};base64,{base64.b64encode(data).decode()}"


def for_model(messages: Iterable[Message], home: Path, sees: bool) -> list[Message]:
    """``messages`` as a model is sent them: a message's images become image parts when the model
    sees images, else a note in its text; the ``images`` key never reaches a server."""
    out: list[Message] = []
    for message in messages:
        images = message.get("images")
        if not images:
            out.append(message)
            continue
        rest = {k: v for k, v in message.items() if k != "images"}
        text = str(message.get("content") or "")
        if not sees:
            rest["content"] = f"{text}\n[{len(images)} image(s) attached, not shown to this model]".strip()
            out.append(rest)
            continue
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for ref in images:
            url = data_url(home, ref)
            if url is None:
                parts.append({"type": "text", "text": "[an image that is no longer kept]"})
            else:
                parts.append({"type": "image_url", "image_url": {"url": url}})
        rest["content"] = parts
        out.append(rest)
    return out


def cannot_see(model_name: str, count: int, zh: bool) -> str:
    """What a turn answers when its model cannot see the images it was sent."""
    if zh:
        return (
            f"我看不到图片：当前模型（{model_name}）不接受图片，所以这 {count} 张图片没有被看，"
            "也什么都没有执行。请用文字描述图片里的内容，"
            "或配置一个能看图的模型（settings.toml 的 [model] 里写 images = true）。"
        )
    return (
        f"I cannot see images: this model ({model_name}) does not take them, so the {count} image(s) were "
        "not looked at and nothing ran. Describe what is in them in words, or configure a model that "
        "sees images ([model] images = true in settings.toml)."
    )
