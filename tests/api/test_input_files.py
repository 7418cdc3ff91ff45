"""`input_file` parts: a stored file, base64 data or a URL, read into text before the model is
asked (PDF page by page, DOCX, HTML, text of every kind), counted in the prompt, stored as sent and
listed as sent; files that cannot be read, and hostile ones, refused with a 400 naming the part,
in bounded time, with nothing stored."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any, cast

import openai
import pytest
from starlette.testclient import TestClient

from app.api.app import create_app
from tests.conftest import Environment, FakeRuntime, rows_written_since, write_mark
from tests.documents import docx_document, pdf, pdf_claiming_pages, pdf_nested, pdf_with_content
from tests.fake_runtime import png


def asked(*parts: dict[str, Any], text: str = "What does it say?") -> Any:
    return [{"role": "user", "content": [{"type": "input_text", "text": text}, *parts]}]


def data_of(raw: bytes, media_type: str = "application/pdf") -> str:
    return f"data:{media_type};base64,{base64.b64encode(raw).decode()}"


def sent_text(fake: FakeRuntime) -> str:
    """The user message's text the model was sent."""
    content = fake.requests()[-1]["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


def test_an_uploaded_pdf_reaches_the_model_as_its_text_page_by_page(client: openai.OpenAI, fake: FakeRuntime) -> None:
    uploaded = client.files.create(
        file=("handbook.pdf", pdf("Vacation is 30 days.", "Remote work on Fridays."), "application/pdf"),
        purpose="user_data",
    )
    response = client.responses.create(model="fake", input=asked({"type": "input_file", "file_id": uploaded.id}))
    assert response.status == "completed"
    text = sent_text(fake)
    assert text.startswith("What does it say?")
    assert '<file name="handbook.pdf" pages="2">' in text
    assert text.index("[page 1]\nVacation is 30 days.") < text.index("[page 2]\nRemote work on Fridays.")
    [item] = client.responses.input_items.list(response.id)
    assert item.model_dump(exclude_none=True)["content"][1] == {"type": "input_file", "file_id": uploaded.id}


@pytest.mark.parametrize(
    ("filename", "raw", "expected"),
    [
        ("notes.docx", docx_document("First paragraph.", "Second paragraph."), "First paragraph.\nSecond paragraph."),
        ("page.html", b"<html><script>steal()</script><body><p>Shown</p><p>text</p></body></html>", "Shown"),
        ("README.md", "# Title\n\n* caf\u00e9 list".encode(), "# Title\n\n* caf\u00e9 list"),
        ("data.csv", b"name,days\nann,30\n", "name,days\nann,30"),
        ("config.json", b'{"key": [1, 2]}', '{"key": [1, 2]}'),
        ("main.py", b"def main() -> None:\n    print('hi')\n", "def main() -> None:"),
        ("utf16.txt", "\ufeffwide text".encode("utf-16"), "wide text"),
    ],
)
def test_file_data_of_every_kind_read_here_reaches_the_model_as_text(
    client: openai.OpenAI, fake: FakeRuntime, filename: str, raw: bytes, expected: str
) -> None:
    part = {"type": "input_file", "filename": filename, "file_data": base64.b64encode(raw).decode()}
    response = client.responses.create(model="fake", input=asked(part))
    text = sent_text(fake)
    assert f'<file name="{filename}">' in text and expected in text
    assert "steal()" not in text
    [item] = client.responses.input_items.list(response.id)
    assert item.model_dump(exclude_none=True)["content"][1] == part  # as sent


def test_a_data_url_and_a_file_in_a_tool_output_are_read_too(client: openai.OpenAI, fake: FakeRuntime) -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "fetch_report", "arguments": "{}"}
    output = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [{"type": "input_file", "filename": "report.pdf", "file_data": data_of(pdf("Quarter was good."))}],
    }
    client.responses.create(
        model="fake",
        input=cast(Any, [*asked(text="Get the report."), call, output]),
        tools=cast(Any, [{"type": "function", "name": "fetch_report", "parameters": {"type": "object"}}]),
    )
    tool_message = fake.requests()[-1]["messages"][-1]
    assert tool_message["role"] == "tool" and "Quarter was good." in tool_message["content"]


def test_a_files_text_is_counted_in_the_prompt(client: openai.OpenAI, fake: FakeRuntime) -> None:
    words = "one two three four five six seven eight nine ten"
    part = {"type": "input_file", "filename": "words.txt", "file_data": base64.b64encode(words.encode()).decode()}
    with_file = client.responses.input_tokens.count(model="counted-model", input=asked(part)).input_tokens
    without = client.responses.input_tokens.count(model="counted-model", input=asked()).input_tokens
    framing = len('<file name="words.txt">'.split()) + len("</file>".split())
    assert with_file == without + 10 + framing
    answered = client.responses.create(model="counted-model", input=asked(part))
    assert answered.usage is not None and answered.usage.input_tokens == with_file


def test_a_file_stays_in_the_context_of_later_turns_without_being_read_again(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    uploaded = client.files.create(file=("facts.txt", b"The code word is PELICAN."), purpose="user_data")
    first = client.responses.create(model="fake", input=asked({"type": "input_file", "file_id": uploaded.id}))
    client.files.delete(uploaded.id)  # read when the request came: the chain keeps what the model saw
    client.responses.create(model="fake", input="And again?", previous_response_id=first.id)
    first_turn = fake.requests()[-1]["messages"][0]["content"]
    assert "The code word is PELICAN." in first_turn


def test_a_conversations_items_take_files_and_list_them_as_sent(client: openai.OpenAI, fake: FakeRuntime) -> None:
    part = {"type": "input_file", "filename": "memo.txt", "file_data": base64.b64encode(b"Meet at noon.").decode()}
    conversation = client.conversations.create(items=asked(part))
    added = client.conversations.items.create(conversation.id, items=asked(part, text="And this one?"))
    assert added.data[0].model_dump(exclude_none=True)["content"][1] == part
    listed = client.conversations.items.list(conversation.id, order="asc").data
    assert [item.model_dump(exclude_none=True)["content"][1] for item in listed] == [part, part]
    item = client.conversations.items.retrieve(str(listed[0].id), conversation_id=conversation.id)
    assert item.model_dump(exclude_none=True)["content"][1] == part
    client.responses.create(model="fake", input="Summarize.", conversation=conversation.id)
    assert json.dumps(fake.requests()[-1]["messages"]).count("Meet at noon.") == 2


PART = "input[0].content[1]"


def sent_as(filename: str, raw: bytes, media_type: str = "application/pdf") -> dict[str, Any]:
    return {"filename": filename, "file_data": data_of(raw, media_type)}


BOMB = pdf_with_content(b"BT /F1 12 Tf " + b"(a) Tj " * 3_000_000 + b"ET")  # 21 MB of drawing, 50 KB sent


@pytest.mark.parametrize(
    ("part", "status", "param", "code"),
    [
        ({"file_id": "file-unknown"}, 404, f"{PART}.file_id", None),
        (sent_as("x.pdf", b"%PDF-1.4 not really"), 400, PART, "invalid_file"),
        (sent_as("x.pdf", b"plain words"), 400, PART, "invalid_file"),
        (sent_as("dot.png", png(), "image/png"), 400, PART, "unsupported_file"),
        (sent_as("blob.bin", b"\x00\x01\xff\xfe\x00"), 400, PART, "unsupported_file"),
        ({"filename": "bad.txt", "file_data": "not base64!"}, 400, f"{PART}.file_data", "invalid_base64"),
        ({"file_data": data_of(b"text")}, 400, f"{PART}.filename", "missing_required_parameter"),
        ({"file_id": "file-a", "file_url": "https://example.com/a.pdf"}, 400, PART, "invalid_value"),
        ({"file_url": "ftp://example.com/a.pdf"}, 400, f"{PART}.file_url", "invalid_value"),
        (sent_as("deep.pdf", pdf_nested(200_000)), 400, PART, "invalid_file"),
        (sent_as("huge.pdf", pdf_claiming_pages(10**9)), 400, PART, None),
        (sent_as("bomb.pdf", BOMB), 400, PART, "file_too_large"),
    ],
)
def test_a_file_that_cannot_be_read_is_refused_naming_its_part_and_nothing_is_stored(
    client: openai.OpenAI,
    fake: FakeRuntime,
    environment: Environment,
    part: dict[str, Any],
    status: int,
    param: str,
    code: str | None,
) -> None:
    mark = write_mark(environment)
    started = time.monotonic()
    with pytest.raises(openai.APIStatusError) as refused:
        client.responses.create(model="fake", input=asked({"type": "input_file", **part}))
    assert time.monotonic() - started < 60
    error = refused.value.body
    assert (refused.value.status_code, error["param"]) == (status, param), error
    if code is not None:
        assert error["code"] == code, error
    assert fake.requests() == [] and rows_written_since(environment, mark) == (0, 0, 0)


def test_another_accounts_file_answers_as_an_unknown_one(
    client: openai.OpenAI, other_client: openai.OpenAI, fake: FakeRuntime
) -> None:
    theirs = other_client.files.create(file=("private.txt", b"not yours"), purpose="user_data")
    with pytest.raises(openai.NotFoundError) as refused:
        client.responses.create(model="fake", input=asked({"type": "input_file", "file_id": theirs.id}))
    assert refused.value.body["message"] == f"No such File object: {theirs.id}"
    assert fake.requests() == []


@pytest.fixture
def strict_reader(environment: Environment) -> Iterator[TestClient]:
    """The application with tight bounds on reading documents: 0.2 s each, 1 MB of files a request."""
    settings = environment.settings().model_copy(
        update={"document_read_seconds": 0.2, "input_files_max_bytes": 1_000_000}
    )
    with TestClient(create_app(settings), base_url="http://testserver") as http:
        yield http


def test_reading_a_file_is_bounded_in_time_and_size(strict_reader: TestClient, api_key: str, fake: FakeRuntime) -> None:
    many_pages = pdf(*(["word " * 400] * 1500), compress=True)  # about 1.5 s to read here
    tall = {"type": "input_file", "filename": "tall.pdf", "file_data": data_of(many_pages)}
    big = {"type": "input_file", "filename": "big.txt", "file_data": data_of(b"x" * 1_100_000, "text/plain")}
    for part, words in ((tall, "took longer than 0.2 s"), (big, "RESPONSES_INPUT_FILES_MAX_BYTES")):
        answer = strict_reader.post(
            "/v1/responses",
            headers={"authorization": f"Bearer {api_key}"},
            json={"model": "fake", "input": asked(part)},
        )
        assert answer.status_code == 400, answer.text
        assert words in answer.json()["error"]["message"]
    assert fake.requests() == []


def test_a_model_that_sees_images_is_sent_a_pdfs_first_pages_beside_its_text(
    client: openai.OpenAI, fake: FakeRuntime
) -> None:
    """counted-model takes 2 images a request: one is the request's own, one is left for pages."""
    from tests.fake_runtime import png

    three = {"type": "input_file", "filename": "deck.pdf", "file_data": data_of(pdf("One", "Two", "Three"))}
    own = {"type": "input_image", "image_url": data_of(png(), "image/png")}
    response = client.responses.create(model="counted-model", input=asked(own, three))
    content = fake.requests()[-1]["messages"][-1]["content"]
    kinds = [part["type"] for part in content]
    assert kinds == ["text", "image_url", "text", "image_url"]  # the question, its image, the file, its first page
    assert "[page 3]\nThree" in content[2]["text"] and content[3]["image_url"]["url"].startswith("data:image/png")
    [item] = client.responses.input_items.list(response.id)
    assert item.model_dump(exclude_none=True)["content"][2] == three  # as sent: no page images
    client.responses.create(model="fake", input=asked(three))  # a model that sees no images: text alone
    assert isinstance(fake.requests()[-1]["messages"][-1]["content"], str)
