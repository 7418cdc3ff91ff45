"""A job is JSON in Redis (app/queue/jobs.py): what it carries reads back as it was, whatever the
request held, and nothing in it can run code."""

from __future__ import annotations

from arq.jobs import deserialize_job_raw

from app.protocol.response_object import ResponseRecord
from app.queue.jobs import CarriedResponse, GenerateJob, job_deserializer


def carrying(settings: dict[str, object]) -> GenerateJob:
    record = ResponseRecord("resp_1", "m", "queued", 1.5, "be brief", None, settings, {"k": "v"}, True, False, True)
    return GenerateJob("resp_1", "q", CarriedResponse(record, [{"type": "message", "content": "hi"}]))


def read_back(job: GenerateJob) -> CarriedResponse:
    name, args, kwargs, _, enqueued_ms = deserialize_job_raw(job.serialized(1234), deserializer=job_deserializer)
    assert (name, args[0], args[1], kwargs, enqueued_ms) == ("generate", "resp_1", None, {}, 1234)
    return CarriedResponse.decoded(args[2])


def test_a_carried_response_reads_back_as_it_was() -> None:
    job = carrying({"tools": [{"type": "function", "parameters": {"type": "object"}}], "temperature": 0.5})
    assert job.carried is not None
    assert read_back(job) == job.carried


def test_an_integer_past_64_bits_in_a_tools_schema_is_carried_too() -> None:
    """(orjson refuses it; the job is encoded by the stdlib's JSON then.)"""
    job = carrying({"tools": [{"type": "function", "parameters": {"type": "integer", "maximum": 2**70}}]})
    assert read_back(job).record.settings["tools"][0]["parameters"]["maximum"] == 2**70
