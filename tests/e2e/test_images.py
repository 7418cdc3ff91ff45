"""Images are checked before anything is stored, and image and file URLs are fetched by this
server through its egress guard, never by the model server.

No test here sends traffic beyond this machine: the refused addresses are refused before any
connection is made, and the images served come from the fake runtime on loopback, which a
second API process is told it may fetch from (RESPONSES_IMAGE_FETCH_ALLOW)."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from PIL import Image

from app.protocol.images import data_url
from tests.conftest import Environment, FakeRuntime, api_client, rows_written_since, write_mark
from tests.fake_runtime import png


def ask(client: openai.OpenAI, url: str) -> Any:
    content = [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": url}]
    return client.responses.create(model="thinking-model", input=[{"role": "user", "content": content}])  # type: ignore[misc, list-item]


def encoded(image: Image.Image, fmt: str, **options: Any) -> str:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return f"data:image/{fmt.lower()};base64,{base64.b64encode(out.getvalue()).decode()}"


def animated_gif() -> str:
    frames = [Image.new("RGB", (4, 4), color) for color in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:])
    return f"data:image/gif;base64,{base64.b64encode(out.getvalue()).decode()}"


PARAM = "input[0].content[1].image_url"


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("data:image/png;base64,not base64!", "invalid_base64_image"),
        ("data:image/png,rawbytes", "invalid_base64_image"),
        ("data:image/png;base64," + base64.b64encode(b"plain text, not an image").decode(), "invalid_image"),
        ("data:image/png;base64," + base64.b64encode(png()[:-20]).decode(), "invalid_image"),  # truncated
        (encoded(Image.new("RGB", (2, 2)), "BMP"), "invalid_image"),
        (animated_gif(), "invalid_image"),
        (encoded(Image.new("1", (10_000, 4_001)), "PNG"), "invalid_image"),  # over 40 million pixels
    ],
)
def test_a_bad_inline_image_is_refused_naming_it_and_nothing_is_stored(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment, url: str, code: str
) -> None:
    mark = write_mark(environment)
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, url)
    assert (caught.value.body["param"], caught.value.body["code"]) == (PARAM, code)
    assert fake.requests() == [] and rows_written_since(environment, mark) == (0, 0, 0)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_each_supported_format_reaches_the_model(client: openai.OpenAI, fake: FakeRuntime, fmt: str) -> None:
    url = encoded(Image.new("RGB", (8, 8), (10, 200, 10)), fmt)
    assert ask(client, url).status == "completed"
    assert fake.requests()[0]["messages"][0]["content"][1]["image_url"]["url"] == url


@pytest.fixture(scope="module")
def fetching_client(environment: Environment, api_key: str) -> Iterator[openai.OpenAI]:
    """An API that may fetch from 127.0.0.1 (where the fake runtime serves images), and only there."""
    allowed = {"RESPONSES_IMAGE_FETCH_ALLOW": "127.0.0.1/32", "RESPONSES_IMAGE_FETCH_TIMEOUT": "3"}
    with api_client(environment, api_key, **allowed) as client:
        yield client


def test_an_image_url_is_fetched_here_and_reaches_the_model_as_data(
    fetching_client: openai.OpenAI, fake: FakeRuntime
) -> None:
    response = ask(fetching_client, f"{fake.url}/_files/dot.png")
    sent = fake.requests()[0]["messages"][0]["content"][1]["image_url"]["url"]
    assert sent == data_url(png(), "image/png")
    assert fake.stats()["files_served"] == 1
    [item] = fetching_client.responses.input_items.list(response.id)
    assert item.content[1].image_url == sent  # the image the model saw, for every later turn too


def test_a_redirect_to_an_allowed_image_is_followed(fetching_client: openai.OpenAI, fake: FakeRuntime) -> None:
    ask(fetching_client, f"{fake.url}/_redirect?to=/_files/dot.png")
    assert fake.requests()[0]["messages"][0]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,")


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
        "http://127.0.0.2:9/x.png",  # loopback outside the allowed 127.0.0.1/32
        "http://10.0.0.1/x.png",
    ],
)
def test_a_redirect_into_a_refused_address_is_refused(
    fetching_client: openai.OpenAI, fake: FakeRuntime, environment: Environment, target: str
) -> None:
    mark = write_mark(environment)
    with pytest.raises(openai.BadRequestError) as caught:
        ask(fetching_client, f"{fake.url}/_redirect?to={target}")
    assert (caught.value.body["param"], caught.value.body["code"]) == (PARAM, "invalid_image_url")
    assert fake.requests() == [] and rows_written_since(environment, mark) == (0, 0, 0)


@pytest.mark.parametrize(("path", "words"), [("/_files/text", "not an image"), ("/_files/gone.png", "HTTP 404")])
def test_a_url_that_is_not_an_image_is_refused(
    fetching_client: openai.OpenAI, fake: FakeRuntime, path: str, words: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(fetching_client, fake.url + path)
    assert caught.value.body["code"] == "invalid_image_url" and words in caught.value.body["message"]
    assert fake.requests() == []


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "localhost",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "10.1.2.3",
        "192.168.0.1",
        "169.254.169.254",
        "100.64.0.1",
    ],
)
def test_the_default_guard_fetches_from_no_internal_address(
    client: openai.OpenAI, fake: FakeRuntime, environment: Environment, host: str
) -> None:
    port = fake.url.rsplit(":", 1)[1]
    mark = write_mark(environment)
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, f"http://{host}:{port}/_files/dot.png")
    assert (caught.value.body["param"], caught.value.body["code"]) == (PARAM, "invalid_image_url")
    assert fake.stats()["files_served"] == 0 and fake.requests() == []
    assert rows_written_since(environment, mark) == (0, 0, 0)


def test_image_urls_can_be_turned_off(environment: Environment, api_key: str, fake: FakeRuntime) -> None:
    with api_client(
        environment, api_key, RESPONSES_IMAGE_URLS="off", RESPONSES_IMAGE_FETCH_ALLOW="127.0.0.1/32"
    ) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            ask(client, f"{fake.url}/_files/dot.png")
        assert (caught.value.body["param"], caught.value.body["code"]) == (PARAM, "unsupported_value")
        assert fake.stats()["files_served"] == 0
        assert ask(client, data_url(png(), "image/png")).status == "completed"


def ask_about_file(client: openai.OpenAI, part: dict[str, Any]) -> Any:
    content = [{"type": "input_text", "text": "Summarize."}, {"type": "input_file", **part}]
    return client.responses.create(model="fake", input=[{"role": "user", "content": content}])  # type: ignore[misc, list-item]


def test_a_file_url_is_fetched_here_read_and_listed_as_sent(fetching_client: openai.OpenAI, fake: FakeRuntime) -> None:
    url = f"{fake.url}/_redirect?to=/_files/report"
    response = ask_about_file(fetching_client, {"file_url": url})
    sent = fake.requests()[0]["messages"][0]["content"]
    assert '<file name="report.pdf" pages="1">' in sent and "Revenue rose 12 percent." in sent  # named by its type
    [item] = fetching_client.responses.input_items.list(response.id)
    assert item.model_dump(exclude_none=True)["content"][1] == {"type": "input_file", "file_url": url}


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://169.254.169.254/latest/meta-data/", "not fetched"),
        ("/_files/gone.pdf", "HTTP 404"),
        ("/_files/dot.png", "cannot be read"),
    ],
)
def test_a_file_url_that_is_refused_or_unreadable_is_a_400_and_nothing_is_stored(
    fetching_client: openai.OpenAI, fake: FakeRuntime, environment: Environment, url: str, words: str
) -> None:
    mark = write_mark(environment)
    with pytest.raises(openai.BadRequestError) as caught:
        ask_about_file(fetching_client, {"file_url": url if url.startswith("http") else fake.url + url})
    assert caught.value.body["param"].startswith("input[0].content[1]") and words in caught.value.body["message"]
    assert fake.requests() == [] and rows_written_since(environment, mark) == (0, 0, 0)
