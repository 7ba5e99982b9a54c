// The official TypeScript clients against the server (tests/test_mcp.py test_typescript_clients):
// the SDK's SkillsClient (SEP-2640: lists, gets and reads every file of every skill, verifying
// each against its entry; it refuses a whole listing for one invalid entry) and the Tasks
// extension's client (SEP-2663: skill_run settled through its task). Prints one JSON object.
//   node clients.mjs URL [KEY]
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { SkillsClient } from "@modelcontextprotocol/client/ext/skills";
import { createTaskSessionFromClient, resultFromTaskOutcome } from "@modelcontextprotocol/ext-tasks/client";

const [url, key] = process.argv.slice(2);
const headers = key ? { Authorization: `Bearer ${key}` } : {};
const client = new Client(
  { name: "skill-executor-tests", version: "0" },
  {
    capabilities: { extensions: { "io.modelcontextprotocol/skills": {}, "io.modelcontextprotocol/tasks": {} } },
    versionNegotiation: { mode: "auto" }, // server/discover: 2026-07-28 when the server speaks it
  },
);
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
const out = { protocolVersion: client.getNegotiatedProtocolVersion?.() ?? null };
const skills = new SkillsClient(client);
out.supported = skills.supported;
out.directoryRead = skills.directoryRead;
const listing = await skills.list();
out.listed = listing.skills.map((s) => s.uri);
out.cache = [listing.ttlMs, listing.cacheScope];
out.files = {};
for (const entry of listing.skills) {
  const { skill } = await skills.get(entry.uri);
  out.files[entry.uri] = [];
  for (const resource of skill.resources) {
    const file = await skills.read(skill, resource.uri);
    out.files[entry.uri].push([resource.uri, file.bytes.length, file.verified]);
  }
}
out.directory = (await skills.readDirectory("skill://math-tools")).resources.map((r) => [r.uri, r.mimeType]);
// On 2026-07-28 the Tasks client sends its requests itself, framed as it is told, through a raw
// JSON-RPC POST (Streamable HTTP: Mcp-Method, and Mcp-Name = the tool's name or the task's id).
const capabilities = { extensions: { "io.modelcontextprotocol/tasks": {} } };
let nextId = 1;
async function rawDispatch(request) {
  const name = request.params?.name ?? request.params?.taskId;
  const response = await fetch(url, {
    method: "POST",
    headers: {
      ...headers,
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "MCP-Protocol-Version": "2026-07-28",
      "Mcp-Method": request.method,
      ...(name === undefined ? {} : { "Mcp-Name": String(name) }),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: `task-${nextId++}`, ...request }),
  });
  const text = await response.text();
  const data = text.trimStart().startsWith("{")
    ? text
    : text.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5)).pop();
  const message = JSON.parse(data);
  return "error" in message ? { kind: "error", error: message.error } : { kind: "result", result: message.result };
}
const session = createTaskSessionFromClient(client, {
  endpointId: url,
  rawDispatch,
  v2RequestFraming: {
    protocolVersion: "2026-07-28",
    clientInfo: { name: "skill-executor-tests", version: "0" },
    clientCapabilities: capabilities,
  },
});
try {
  const execution = await session.callTool("skill_run", { skill: "math-tools", command: "sleep 1; echo from-a-task" });
  const { outcome } = await execution.settle();
  out.taskId = outcome.task?.taskId ?? null;
  out.taskResult = resultFromTaskOutcome(outcome);
} finally {
  await session.close();
}
await client.close();
console.log(JSON.stringify(out));
