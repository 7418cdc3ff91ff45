"""The vLLM runtime end to end on a GPU: a worker hosting a real vLLM model, driven through the
openai SDK. Run by an operator on a GPU host with vLLM installed and the weights at hand:

    RESPONSES_GPU_MODEL=Qwen/Qwen3-0.6B pytest -m gpu

Skipped without a GPU or without vLLM. RESPONSES_GPU_VLLM names the `vllm` executable (default:
the one on PATH); pointing it at tests/stand_in_vllm.py checks this file's plumbing without a GPU.
The assertions are structural (statuses, usage arithmetic, event order), true of any model.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
from collections.abc import Iterator

import openai
import pytest

from tests.conftest import Environment, create_key, free_port, start_api, start_worker, stop, wait_until

VLLM = os.environ.get("RESPONSES_GPU_VLLM") or shutil.which("vllm")
MODEL = os.environ.get("RESPONSES_GPU_MODEL", "Qwen/Qwen3-0.6B")
HAS_GPU = shutil.which("nvidia-smi") is not None

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        VLLM is None or (not HAS_GPU and "RESPONSES_GPU_VLLM" not in os.environ), reason="needs a GPU and vLLM"
    ),
]


@pytest.fixture(scope="module")
def gpu_client(environment: Environment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    catalog = tmp_path_factory.mktemp("gpu") / "models.toml"
    catalog.write_text(
        f'[[models]]\nid = "gpu-model"\nruntime = "vllm"\nmodel = "{MODEL}"\nexecutable = "{VLLM}"\n'
        "context_window = 4096\nmax_output_tokens = 2048\ngpu_memory_utilization = 0.8\n"
    )
    own = dataclasses.replace(environment, models_path=catalog, queue_name=f"responses:gpu:{secrets.token_hex(4)}")
    port = free_port()
    api = start_api(own, port)
    worker = start_worker(own, "--model", "gpu-model")
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=create_key(own, "gpu"), max_retries=0, timeout=1800
    )
    try:
        client.responses.create(model="gpu-model", input="Hi", max_output_tokens=16)  # waits for vLLM to load
        yield client
    finally:
        stop(worker, api, grace=60)


def test_a_chat_with_usage_from_vllm(gpu_client: openai.OpenAI) -> None:
    response = gpu_client.responses.create(model="gpu-model", input="Name three colours.", max_output_tokens=64)
    assert response.status in ("completed", "incomplete") and response.output_text
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and 0 < usage.output_tokens <= 64
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_stream_adds_up_to_the_stored_answer(gpu_client: openai.OpenAI) -> None:
    with gpu_client.responses.stream(model="gpu-model", input="Count to ten.", max_output_tokens=64) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text == gpu_client.responses.retrieve(final.id).output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_chain_carries_the_earlier_turns(gpu_client: openai.OpenAI) -> None:
    first = gpu_client.responses.create(model="gpu-model", input="My name is Ada.", max_output_tokens=32)
    second = gpu_client.responses.create(
        model="gpu-model", input="What is my name?", previous_response_id=first.id, max_output_tokens=32
    )
    assert first.usage is not None and second.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens


def test_a_background_response_can_be_cancelled_mid_generation(gpu_client: openai.OpenAI) -> None:
    long_one = "#fake " + '{"text": "' + " ".join(["w"] * 400) + '", "delay": 0.02}'  # read by the stand-in only
    response = gpu_client.responses.create(
        model="gpu-model",
        input=f"{long_one}\nWrite a 3000-word essay on lighthouses.",
        background=True,
        max_output_tokens=2048,
    )
    wait_until(lambda: gpu_client.responses.retrieve(response.id).status == "in_progress", timeout=120)
    cancelled = gpu_client.responses.cancel(response.id)
    assert cancelled.status == "cancelled"
