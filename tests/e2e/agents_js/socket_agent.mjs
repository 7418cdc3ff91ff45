// The OpenAI Agents SDK for JavaScript runs a tool-using agent over WebSocket mode
// (setOpenAIResponsesTransport("websocket")) against the server at OPENAI_BASE_URL. Argument:
// the user's prompt. Prints one JSON line: the final output, the last response id, and the tool
// calls the agent ran.
import { Agent, run, tool, setOpenAIResponsesTransport, setTracingDisabled, setDefaultOpenAIClient } from "@openai/agents";
import OpenAI from "openai";
import { WebSocket } from "ws";
import { z } from "zod";

globalThis.WebSocket ??= WebSocket; // (Node 20 has none; the SDK needs one that takes headers)

setTracingDisabled(true);
setOpenAIResponsesTransport("websocket");
setDefaultOpenAIClient(new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY, maxRetries: 0 }));

const ran = [];
const getWeather = tool({
  name: "get_weather",
  description: "The weather in a city.",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    ran.push(city);
    return `Sunny in ${city}`;
  },
});

const agent = new Agent({ name: "assistant", instructions: "Use the tools.", tools: [getWeather], model: process.env.MODEL ?? "fake" });
const result = await run(agent, process.argv[2]);
console.log(JSON.stringify({ final_output: result.finalOutput, last_response_id: result.lastResponseId, ran }));
process.exit(0);
