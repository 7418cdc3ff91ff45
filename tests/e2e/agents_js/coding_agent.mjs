// The Agents SDK for JavaScript's shellTool and applyPatchTool over WebSocket mode, against the
// server at OPENAI_BASE_URL, in the workspace folder WORKSPACE: the editor applies the model's
// patches there, the shell runs its commands there. Argument: the user's prompt. Prints one
// JSON line: the agent's final output and the types of the tool calls it ran.
import { Agent, run, shellTool, applyPatchTool, applyDiff, setOpenAIResponsesTransport, setTracingDisabled, setDefaultOpenAIClient } from "@openai/agents";
import OpenAI from "openai";
import { WebSocket } from "ws";
import { execSync } from "node:child_process";
import { readFileSync, writeFileSync, unlinkSync } from "node:fs";
import { join } from "node:path";

globalThis.WebSocket ??= WebSocket; // (Node 20 has none; the SDK needs one that takes headers)

setTracingDisabled(true);
setOpenAIResponsesTransport("websocket");
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 }));
const root = process.env.WORKSPACE;

const editor = {
  async createFile(operation) {
    writeFileSync(join(root, operation.path), applyDiff("", operation.diff, "create"));
    return { status: "completed", output: `created ${operation.path}` };
  },
  async updateFile(operation) {
    const path = join(root, operation.path);
    writeFileSync(path, applyDiff(readFileSync(path, "utf8"), operation.diff));
    return { status: "completed", output: `updated ${operation.path}` };
  },
  async deleteFile(operation) {
    unlinkSync(join(root, operation.path));
    return { status: "completed" };
  },
};

const shell = {
  async run(action) {
    const output = action.commands.map((command) => {
      try {
        const stdout = execSync(command, { cwd: root, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
        return { stdout, stderr: "", outcome: { type: "exit", exitCode: 0 } };
      } catch (failed) {
        return { stdout: failed.stdout ?? "", stderr: failed.stderr ?? "", outcome: { type: "exit", exitCode: failed.status ?? 1 } };
      }
    });
    return { output };
  },
};

const agent = new Agent({
  name: "coder",
  instructions: "Write and test code.",
  tools: [shellTool({ shell }), applyPatchTool({ editor })],
  model: process.env.MODEL ?? "fake",
});
const result = await run(agent, process.argv[2], { maxTurns: 8 });
const calls = result.newItems.filter((item) => item.type === "tool_call_item").map((item) => item.rawItem?.type);
console.log(JSON.stringify({ final_output: result.finalOutput, calls }));
process.exit(0);
