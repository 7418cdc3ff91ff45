// The OpenAI SDK for JavaScript's document helpers, then the Agents SDK's fileSearchTool over
// WebSocket mode, against the server at OPENAI_BASE_URL. Argument: the user's prompt. Prints one
// JSON line: what the helpers saw, the agent's final output and the search it saw.
import { Agent, run, fileSearchTool, setOpenAIResponsesTransport, setTracingDisabled, setDefaultOpenAIClient } from "@openai/agents";
import OpenAI, { toFile } from "openai";
import { WebSocket } from "ws";

globalThis.WebSocket ??= WebSocket; // (Node 20 has none; the SDK needs one that takes headers)

setTracingDisabled(true);
setOpenAIResponsesTransport("websocket");
const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 });
setDefaultOpenAIClient(client);

const store = await client.vectorStores.create({ name: "handbook" });
const one = await client.vectorStores.files.uploadAndPoll(
  store.id,
  await toFile(Buffer.from("Every employee receives thirty days of paid vacation per year."), "vacation.txt"),
  { pollIntervalMs: 200 },
);
const batch = await client.vectorStores.fileBatches.uploadAndPoll(
  store.id,
  { files: [await toFile(Buffer.from("Employees may work from home on Mondays and Fridays."), "remote.txt")] },
  { pollIntervalMs: 200 },
);
const found = await client.vectorStores.search(store.id, { query: "working from home" });
const hits = [];
for await (const hit of found) hits.push(hit.filename);

const agent = new Agent({
  name: "assistant",
  instructions: "Answer from the files.",
  tools: [fileSearchTool([store.id], { includeSearchResults: true, maxNumResults: 2 })],
  model: process.env.MODEL ?? "fake",
});
const result = await run(agent, process.argv[2]);
// (the SDK keeps a hosted tool's call as a hosted_tool_call, the item as sent in its providerData)
const searches = result.newItems
  .filter((item) => item.rawItem?.type === "hosted_tool_call" && item.rawItem.name === "file_search_call")
  .map((item) => item.rawItem.providerData);
const message = result.newItems.find((item) => item.rawItem?.type === "message")?.rawItem;
const annotations = message?.content?.[0]?.providerData?.annotations ?? [];
console.log(JSON.stringify({
  uploaded: one.status,
  batch_counts: batch.file_counts,
  hits,
  final_output: result.finalOutput,
  searches,
  annotations,
}));
process.exit(0);
