// The Agents SDK for JavaScript's toolSearchTool (the server's search) with a deferred function
// tool, over WebSocket mode, against the server at OPENAI_BASE_URL. Argument: the user's prompt.
// Prints one JSON line: the agent's final output and the types of the items it saw.
import { Agent, run, tool, toolSearchTool, setOpenAIResponsesTransport, setTracingDisabled, setDefaultOpenAIClient } from "@openai/agents";
import OpenAI from "openai";
import { WebSocket } from "ws";
import { z } from "zod";

globalThis.WebSocket ??= WebSocket; // (Node 20 has none; the SDK needs one that takes headers)

setTracingDisabled(true);
setOpenAIResponsesTransport("websocket");
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 }));

const getWeather = tool({
  name: "get_weather",
  description: "The weather forecast for a city.",
  parameters: z.object({ city: z.string() }),
  deferLoading: true,
  execute: async ({ city }) => `Sunny in ${city}, 24 degrees.`,
});

const agent = new Agent({
  name: "assistant",
  instructions: "Use tools.",
  tools: [getWeather, toolSearchTool()],
  model: process.env.MODEL ?? "fake",
});
const result = await run(agent, process.argv[2]);
const items = result.newItems.map((item) => item.rawItem?.type === "hosted_tool_call" ? item.rawItem.name : item.rawItem?.type);
console.log(JSON.stringify({ final_output: result.finalOutput, items }));
process.exit(0);
