"""``[research]`` in settings.toml: defaults, strict values, clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.toolkits.web.conftest import write_research
from tether.config import ResearchSettings
from tether.errors import ConfigError
from tether.toolkits.web.specs import ReadUrlParams


def test_defaults_reach_public_addresses_only(home: Path) -> None:
    settings = ResearchSettings.load(home, environ={})
    assert settings.search_provider == "" and settings.allow_hosts == ()
    assert settings.allow_private_networks is False
    assert (settings.fetch_max_bytes, settings.fetch_timeout_s, settings.fetch_max_redirects) == (
        5 * 1024**2,
        20.0,
        5,
    )


def test_the_file_and_the_environment_set_it(home: Path) -> None:
    write_research(
        home, search_provider="searxng", searxng_url="http://192.168.1.5:8888", allow_hosts=["nas.lan"]
    )
    settings = ResearchSettings.load(home, environ={"TETHER_FETCH_TIMEOUT_S": "7.5"})
    assert settings.searxng_url == "http://192.168.1.5:8888" and settings.allow_hosts == ("nas.lan",)
    assert settings.fetch_timeout_s == 7.5


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"search_provider": "google"}, "search_provider"),
        ({"searxng_url": "ftp://x"}, "searxng_url"),
        ({"fetch_max_bytes": 10}, "fetch_max_bytes"),
        ({"fetch_timeout_s": 0}, "fetch_timeout_s"),
        ({"fetch_max_redirects": 50}, "fetch_max_redirects"),
        ({"allow_hosts": ["has space"]}, "allow_hosts"),
        ({"allow_private_network": True}, "did you mean 'allow_private_networks'"),
    ],
)
def test_bad_values_are_refused_naming_the_setting(home: Path, values: dict[str, object], says: str) -> None:
    write_research(home, **values)
    with pytest.raises(ConfigError) as caught:
        ResearchSettings.load(home, environ={})
    assert says in caught.value.message


@given(st.text(max_size=300))
def test_read_url_params_accept_http_urls_only(url: str) -> None:
    try:
        params = ReadUrlParams.model_validate({"url": url})
    except ValidationError as exc:
        assert exc.errors()[0]["loc"] == ("url",)
        return
    assert params.url.lower().startswith(("http://", "https://"))
