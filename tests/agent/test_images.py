"""Images with a message: checked by their bytes, kept once in the home, sent as image parts to a
model that sees them, answered in plain words by one that does not (nothing runs)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.agent import images
from tether.agent.session import ConversationSession
from tether.errors import ConfigError
from tether.execution.executor import Executor
from tether.models.offline import OfflineModel
from tether.testing import ScriptedModel, say

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def test_an_image_is_known_by_its_bytes_and_kept_once(tmp_path: Path) -> None:
    assert images.sniff(PNG) == "image/png"
    assert images.sniff(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert images.sniff(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert images.sniff(b"GIF89a...") == "image/gif"
    first = images.save(tmp_path, PNG)
    again = images.save(tmp_path, PNG)
    assert first == again and first["mime"] == "image/png"
    kept = list((tmp_path / "images").iterdir())
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o777 == 0o600
    with pytest.raises(ConfigError, match="PNG, JPEG, GIF or WebP"):
        images.save(tmp_path, b"<svg onload=alert(1)>", "x.png")  # a name is not a type
    with pytest.raises(ConfigError, match="at most"):
        images.check(b"\x89PNG\r\n\x1a\n" + b"0" * images.MAX_BYTES)
    with pytest.raises(ConfigError, match="at most 4"):
        images.save_all(tmp_path, [("a", PNG)] * 5)


@given(st.binary(max_size=64))
def test_any_bytes_are_an_image_type_or_a_clear_refusal(data: bytes) -> None:
    try:
        assert images.check(data) in images.KINDS
    except ConfigError as exc:
        assert "PNG, JPEG, GIF or WebP" in exc.message


@given(
    st.recursive(
        st.none() | st.text(max_size=70) | st.integers(),
        lambda c: st.lists(c) | st.dictionaries(st.text(max_size=8), c),
        max_leaves=8,
    )
)
def test_image_references_from_a_request_are_checked(value: object) -> None:
    try:
        images.refs(value)
    except ConfigError as exc:
        assert "images" in exc.message


def test_a_model_that_sees_images_gets_them_as_image_parts(executor: Executor) -> None:
    import asyncio

    model = ScriptedModel([say("A single pixel."), say("Still one pixel.")])
    model.supports_images = True
    session = ConversationSession(executor, model)
    kept = images.save_all(executor.home, [("dot.png", PNG)])
    result = asyncio.run(session.send("img-1", "what is in this picture?", images=kept))
    assert result.final == "A single pixel."
    user = [m for m in model.requests[0][0] if m["role"] == "user"][-1]
    assert user["content"][0] == {"type": "text", "text": "what is in this picture?"}
    assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    assert all("images" not in m for m in model.requests[0][0])  # tether's own key never leaves
    # The thread keeps the reference, not the bytes; a later turn still shows the image to this model.
    asyncio.run(session.send("img-1", "and now?"))
    again = [m for m in model.requests[1][0] if m["role"] == "user"]
    assert isinstance(again[0]["content"], list) and again[-1]["content"] == "and now?"


@pytest.mark.parametrize(
    ("text", "words"), [("这张图里是什么？", "我看不到图片"), ("what is this?", "I cannot see images")]
)
def test_a_model_that_cannot_see_says_so_and_runs_nothing(executor: Executor, text: str, words: str) -> None:
    import asyncio

    session = ConversationSession(executor, OfflineModel())
    kept = images.save_all(executor.home, [("dot.png", PNG)])
    result = asyncio.run(session.send(f"blind-{len(text)}", text, images=kept))
    assert result.status.value == "failed" and words in result.final and "offline" in result.final
    assert not [s for s in result.steps if s.kind in ("tool", "model")]
