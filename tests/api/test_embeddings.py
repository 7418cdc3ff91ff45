"""`POST /v1/embeddings` through the OpenAI SDK, from the embedded CPU model and from an external
server, as floats and as base64 (the SDK's default); bad input refused naming the parameter."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.fake_runtime import fake_embedding


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_the_embedded_model_embeds_texts_by_meaning(client: openai.OpenAI) -> None:
    texts = ["How many vacation days do I get?", "Employees receive thirty days of paid leave.", "GPU drivers"]
    answer = client.embeddings.create(model="minilm", input=texts)  # (the SDK asks for base64 and decodes it)
    vectors = [item.embedding for item in answer.data]
    assert [item.index for item in answer.data] == [0, 1, 2] and answer.model == "minilm"
    assert all(len(v) == 384 and abs(cosine(v, v) - 1) < 1e-3 for v in vectors)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2
    assert answer.usage.prompt_tokens == answer.usage.total_tokens > 10
    floats = client.embeddings.create(model="text-embedding-3-small", input=texts[0], encoding_format="float")
    assert max(abs(x - y) for x, y in zip(floats.data[0].embedding, vectors[0], strict=True)) < 1e-5


def test_an_external_servers_vectors_are_passed_on(client: openai.OpenAI) -> None:
    answer = client.embeddings.create(model="remote-embedder", input=["cats purr"], encoding_format="float")
    assert answer.data[0].embedding == pytest.approx(fake_embedding("cats purr"))
    assert answer.usage.prompt_tokens == 2


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "minilm", "input": ""}, 400, "input"),
        ({"model": "minilm", "input": ["ok", ""]}, 400, "input[1]"),
        ({"model": "minilm", "input": [[1, 2, 3]]}, 400, "input[0]"),
        ({"model": "minilm", "input": ["x" * 60_000] * 21}, 400, "input"),  # past 1.2 million characters together
        ({"model": "minilm", "input": "x", "dimensions": 128}, 400, "dimensions"),
        ({"model": "fake", "input": "x"}, 400, "model"),
        ({"model": "nope", "input": "x"}, 400, "model"),
        ({"model": "minilm", "input": "x", "encoding_format": "int8"}, 400, "encoding_format"),
    ],
)
def test_bad_input_is_refused_naming_its_parameter(
    client: openai.OpenAI, body: dict[str, Any], status: int, param: str
) -> None:
    with pytest.raises(openai.APIStatusError) as refused:
        client.post("/embeddings", body=body, cast_to=object)
    assert (refused.value.status_code, refused.value.body["param"]) == (status, param)


def test_an_embedding_model_is_listed_and_cannot_answer_a_response(client: openai.OpenAI) -> None:
    assert "minilm" in [m.id for m in client.models.list()]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="minilm", input="hi")
    assert refused.value.body["code"] == "model_not_supported"
