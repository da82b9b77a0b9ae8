// One scripted MCP session against `tether mcp serve`, driven by the TypeScript SDK's client: a peer
// that shares no code with the Python SDK the server is built on. Over stdio (it starts the server) or
// streamable HTTP (a running server, the home's token as a bearer). It prints what it saw as one JSON
// document; the Python test asserts on it and on the store.
//
//   node session.mjs stdio <python> <cwd>      (TETHER_HOME etc. come from the environment)
//   node session.mjs http <url> <token>
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const GOLD = { instance_type: "拟造花萼（金）", instance_name: "藏珍之蕾" };
const [how, first, second] = process.argv.slice(2);

function transport() {
  if (how === "stdio") {
    const env = Object.fromEntries(Object.entries(process.env).filter(([, v]) => v !== undefined));
    return new StdioClientTransport({
      command: first,
      args: ["-m", "tether.interfaces.cli", "mcp", "serve"],
      env,
      cwd: second,
      stderr: "inherit",
    });
  }
  return new StreamableHTTPClientTransport(new URL(first), {
    requestInit: { headers: { Authorization: `Bearer ${second}` } },
  });
}

const seen = { asked: [], answers: [] };
const answers = ["decline", "accept"]; // the person declines the first question, accepts the second
const client = new Client({ name: "ts-peer", version: "1.0.0" }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  seen.asked.push(request.params.message);
  const action = answers.shift() ?? "decline";
  seen.answers.push(action);
  return action === "accept" ? { action, content: { confirm: true } } : { action };
});

const outcome = (result) => ({
  isError: Boolean(result.isError),
  text: (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n"),
  structured: result.structuredContent ?? null,
});

await client.connect(transport());
seen.version = client.getServerVersion()?.name ?? null;
seen.tools = (await client.listTools()).tools.map((t) => ({ name: t.name, annotations: t.annotations ?? {} }));
seen.start = outcome(await client.callTool({ name: "demo.start_game", arguments: {} }));
seen.bad = outcome(await client.callTool({ name: "demo.farm_instance", arguments: { attempts: "many" } }));
seen.declined = outcome(await client.callTool({ name: "demo.salvage_relics", arguments: { rarity: 3 } }));
seen.accepted = outcome(await client.callTool({ name: "demo.salvage_relics", arguments: { rarity: 3 } }));

// A background job: its id at once, its progress through jobs.status, then stopped.
const loop = outcome(await client.callTool({ name: "demo.loop_farm", arguments: {} }));
const id = loop.structured.execution_id;
seen.loop = loop;
for (;;) {
  const status = outcome(await client.callTool({ name: "jobs.status", arguments: { execution_id: id } }));
  if (status.structured?.data?.progress) {
    seen.status = status;
    break;
  }
  await new Promise((resolve) => setTimeout(resolve, 50));
}
seen.stop = outcome(await client.callTool({ name: "jobs.stop", arguments: { execution_id: id } }));

// A foreground call's progress, as MCP progress notifications.
seen.progress = [];
seen.farm = outcome(
  await client.callTool({ name: "demo.farm_instance", arguments: { ...GOLD, attempts: 6 } }, undefined, {
    onprogress: (p) => seen.progress.push(p),
    resetTimeoutOnProgress: true,
  }),
);

// A call the client cancels once it reports progress: the SDK sends notifications/cancelled.
const abort = new AbortController();
try {
  await client.callTool({ name: "demo.farm_instance", arguments: { ...GOLD, attempts: 99 } }, undefined, {
    signal: abort.signal,
    onprogress: () => abort.abort("the person changed their mind"),
    resetTimeoutOnProgress: true,
  });
  seen.cancelled = "finished";
} catch (error) {
  seen.cancelled = String(error?.message ?? error);
}
// What it saw, then the session stays open until the test has looked at the store and closes our
// stdin: a client that closed at once could drop its cancellation on the way (the SDK sends it without
// waiting), and a disconnection is not a cancellation in MCP.
process.stdout.write(JSON.stringify(seen) + "\n");
process.stdin.resume();
await new Promise((resolve) => process.stdin.on("end", resolve));
await client.close();
