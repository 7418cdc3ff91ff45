#!/usr/bin/env bash
# Installs, once per machine, the OpenAI Agents SDK for JavaScript that tests/e2e/test_agents_js.py
# runs (socket_agent.mjs) into $RESPONSES_AGENTS_JS_HOME (default
# ~/.cache/responses-server/agents-js-VERSION), and prints that folder. Needs Node.js 20 or newer
# and npm; a later run with the same versions returns at once.
set -euo pipefail

AGENTS_VERSION=0.20.0
HOME_DIR="${RESPONSES_AGENTS_JS_HOME:-$HOME/.cache/responses-server/agents-js-$AGENTS_VERSION}"
STAMP="@openai/agents@$AGENTS_VERSION zod@4 ws@8"

if [[ -f "$HOME_DIR/stamp" && "$(cat "$HOME_DIR/stamp")" == "$STAMP" ]]; then
    echo "$HOME_DIR"
    exit 0
fi
rm -rf "$HOME_DIR"
mkdir -p "$HOME_DIR"
echo '{"name": "responses-server-agents-js", "private": true, "type": "module"}' > "$HOME_DIR/package.json"
(cd "$HOME_DIR" && npm install --silent --no-audit --no-fund $STAMP >&2)
echo "$STAMP" > "$HOME_DIR/stamp"
echo "$HOME_DIR"
