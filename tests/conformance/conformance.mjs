// The sandbox MCP server as the official TypeScript SDK client meets it (what the MCP Inspector
// and many agent hosts are built on). The client validates every structured result against the
// tool's output schema, error results included, so a result of the wrong shape throws here.
//
// usage: node conformance.mjs stdio|http
// env: SANDBOX_PYTHON (the interpreter that has `sandbox`), CONFORMANCE_PROJECT (a project
// directory under SANDBOX_ALLOWED_ROOTS), and the server's SANDBOX_* settings (owner label, state
// directory, allowed roots), passed on to the servers this script starts.
// Prints one JSON line per check to stdout; exits non-zero on the first failure.

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const PYTHON = process.env.SANDBOX_PYTHON ?? "python3";
const PROJECT = process.env.CONFORMANCE_PROJECT;
const MAX_SESSIONS = 2;
// The image the server may use but the engine does not have (IMAGE_NOT_FOUND).
const MISSING_IMAGE = "sandbox-conformance-missing:latest";
const TOOLS = [
  "execute",
  "read",
  "read_log",
  "resize",
  "send",
  "server_info",
  "session_create",
  "session_destroy",
  "session_info",
  "session_list",
  "session_update",
  "signal",
];
// Every code of the contract; INTERNAL is a server bug by definition: no client can provoke it.
const UNPROVOKABLE = { INTERNAL: "an unexpected exception in the server; no request causes it" };

function check(name, ok, detail) {
  console.log(JSON.stringify({ check: name, ok: Boolean(ok), detail }));
  if (!ok) {
    throw new Error(`check failed: ${name}: ${JSON.stringify(detail)}`);
  }
}

function serverEnv(extra = {}) {
  return {
    ...process.env,
    SANDBOX_MAX_SESSIONS: String(MAX_SESSIONS),
    SANDBOX_ALLOWED_IMAGES: MISSING_IMAGE,
    ...extra,
  };
}

async function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function stdioClient(extraEnv = {}) {
  const transport = new StdioClientTransport({
    command: PYTHON,
    args: ["-m", "sandbox", "mcp"],
    env: serverEnv(extraEnv),
    stderr: "inherit",
  });
  const client = new Client({ name: "sandbox-conformance", version: "1.0.0" });
  await client.connect(transport);
  return { client, close: async () => client.close() };
}

async function httpClient() {
  const token = randomBytes(16).toString("hex");
  const port = await freePort();
  const proc = spawn(PYTHON, ["-m", "sandbox", "serve", "--port", String(port)], {
    env: serverEnv({ SANDBOX_TOKEN: token }),
    stdio: ["ignore", "inherit", "inherit"],
  });
  const exited = new Promise((resolve) => proc.on("exit", (code) => resolve(code)));
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch {
      // not listening yet
    }
    if (i > 300 || proc.exitCode !== null) throw new Error("sandbox serve did not start");
    await new Promise((r) => setTimeout(r, 100));
  }
  // Without the token: the SDK's error tells the user to set the Authorization header.
  const anonymous = new Client({ name: "sandbox-conformance", version: "1.0.0" });
  let refused = "";
  try {
    await anonymous.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp`)));
  } catch (e) {
    refused = String(e?.message ?? e);
  }
  check("http: a client without the token is told to set the Authorization header", refused.includes("set the Authorization header") && refused.includes("UNAUTHORIZED"), refused.slice(0, 300));
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "sandbox-conformance", version: "1.0.0" });
  await client.connect(transport);
  return {
    client,
    close: async () => {
      await client.close();
      proc.kill("SIGTERM");
      const code = await exited;
      check("http: the server stops cleanly on SIGTERM", code === 0, { code });
    },
  };
}

function parseError(result) {
  const text = result.content?.[0]?.text ?? "";
  return JSON.parse(text).error;
}

async function ok(client, name, args, options) {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  check(`${name} succeeds`, !result.isError, result.content?.[0]?.text?.slice(0, 300));
  check(`${name} returns structured content equal to its text`, JSON.stringify(result.structuredContent) === JSON.stringify(JSON.parse(result.content[0].text)), name);
  return result.structuredContent;
}

async function fails(client, code, name, args) {
  // callTool validates structuredContent against the output schema: a wrong error shape throws.
  const result = await client.callTool({ name, arguments: args });
  const error = result.isError ? parseError(result) : undefined;
  check(`${code} from ${name}`, result.isError && error?.code === code, result.content?.[0]?.text?.slice(0, 300));
  check(`${code} carries no structured content`, result.structuredContent === undefined, result.structuredContent);
  check(`${code} has a message and a hint`, Boolean(error.message) && Boolean(error.hint), error);
  return error;
}

async function tools(client, label) {
  const listed = (await client.listTools()).tools;
  const names = listed.map((t) => t.name).sort();
  check(`${label}: tools/list names the contract's tools`, JSON.stringify(names) === JSON.stringify(TOOLS), names);
  check(`${label}: every tool declares an output schema`, listed.every((t) => t.outputSchema?.type === "object"), names);
}

async function everyTool(client, label) {
  const created = await ok(client, "session_create", { project_path: PROJECT, name: `conf-${label}` });
  const sid = created.session_id;
  const listed = await ok(client, "session_list", {});
  check("session_list lists it", listed.sessions.some((s) => s.session_id === sid), listed.count);
  const info = await ok(client, "session_info", { session_id: sid });
  check("session_info says running", info.status === "running", info.status);
  const server = await ok(client, "server_info", {});
  check("server_info names the engine", Boolean(server.engine?.name), server.engine);
  const ran = await ok(client, "execute", { session_id: sid, command: "echo conformance-$((6*7)); exit_code_probe=1" });
  check("execute returns exactly the output and exit code", ran.output === "conformance-42\n" && ran.exit_code === 0, ran);
  const failed = await ok(client, "execute", { session_id: sid, command: "false" });
  check("a failing command is data, not an error", failed.exit_code === 1, failed.exit_code);
  await ok(client, "send", { session_id: sid, text: "cat", keys: ["Enter"] });
  const typed = await ok(client, "send", { session_id: sid, text: "typed-line\n", wait_ms: 2000 });
  check("send with wait_ms returns what appeared", typed.content.includes("typed-line"), typed.content);
  const screen = await ok(client, "read", { session_id: sid, view: "screen" });
  check("read shows the screen", screen.content.includes("typed-line"), screen.rows);
  const stopped = await ok(client, "signal", { session_id: sid, signal: "SIGINT" });
  check("signal stops the foreground program", stopped.signals_sent.includes("SIGINT"), stopped);
  const resized = await ok(client, "resize", { session_id: sid, rows: 30, cols: 100 });
  check("resize applies", resized.rows === 30 && resized.cols === 100, resized);
  const log = await ok(client, "read_log", { session_id: sid, from_byte: 0 });
  check("read_log pages the raw log", log.chunk.includes("conformance-42"), log.total_bytes);
  return sid;
}

async function progress(client, sid) {
  const seen = [];
  const result = await ok(
    client,
    "execute",
    { session_id: sid, command: "for i in 1 2 3; do echo tick$i; sleep 1; done" },
    { onprogress: (p) => seen.push(p) },
  );
  check("execute sends progress notifications", seen.length >= 1, seen);
  check("progress increases", seen.every((p, i) => i === 0 || p.progress >= seen[i - 1].progress), seen);
  check("the command completes after progress", result.output === "tick1\ntick2\ntick3\n", result.output);
}

async function resetTimeoutOnProgress(client, sid) {
  // 5 s of work under a 2.5 s request timeout: only progress keeps the request alive.
  const command = "for i in 1 2 3 4 5; do echo step$i; sleep 1; done";
  const result = await ok(
    client,
    "execute",
    { session_id: sid, command, timeout_s: 30 },
    { timeout: 2500, resetTimeoutOnProgress: true, onprogress: () => {} },
  );
  check("resetTimeoutOnProgress keeps a long execute alive", result.exit_code === 0 && result.output.includes("step5"), result);
}

async function cancellation(client, sid) {
  const controller = new AbortController();
  let outcome = "completed";
  try {
    await client.callTool(
      { name: "execute", arguments: { session_id: sid, command: "echo started; sleep 607; echo finished" } },
      undefined,
      { signal: controller.signal, onprogress: () => controller.abort("the user pressed stop") },
    );
  } catch (e) {
    outcome = `rejected: ${e?.message ?? e}`;
  }
  check("aborting a long execute rejects the call", outcome.startsWith("rejected"), outcome);
  // The server got notifications/cancelled: the command is stopped and the session is free.
  const after = await ok(client, "execute", { session_id: sid, command: "pgrep -f 'sleep 60[7]' || echo no-sleep", timeout_s: 10 });
  check("the cancelled command was stopped and the session is free", after.output === "no-sleep\n", after.output);
  const info = await ok(client, "session_info", { session_id: sid });
  check("the session is not busy after a cancellation", info.busy === false, info.busy);
}

async function errors(client, sid, label) {
  const covered = new Set();
  const note = (e) => covered.add(e.code);
  note(await fails(client, "INVALID_ARGUMENT", "execute", { session_id: sid, command: "true", timeout_s: -5 }));
  note(await fails(client, "PATH_NOT_ALLOWED", "session_create", { project_path: "/etc" }));
  note(await fails(client, "SESSION_NOT_FOUND", "session_info", { session_id: "nope" }));
  note(await fails(client, "IMAGE_NOT_FOUND", "session_create", { project_path: PROJECT, image: MISSING_IMAGE }));
  // A session whose own program ended: SESSION_EXITED (a plain login shell would be revived).
  const done = await ok(client, "session_create", { project_path: PROJECT, name: `exits-${label}`, command: ["sh", "-c", "exit 3"] });
  for (let i = 0; i < 100; i++) {
    const info = await ok(client, "session_info", { session_id: done.session_id });
    if (info.status === "exited") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  note(await fails(client, "SESSION_EXITED", "send", { session_id: done.session_id, text: "x" }));
  await ok(client, "session_destroy", { session_id: done.session_id, force: true });
  // The second session fills the quota (MAX_SESSIONS), and is busy while a command runs.
  const busy = await ok(client, "session_create", { project_path: PROJECT, name: `busy-${label}` });
  note(await fails(client, "SESSION_LIMIT", "session_create", { project_path: PROJECT, name: `over-${label}` }));
  const running = await ok(client, "execute", { session_id: busy.session_id, command: "sleep 600", background: true, timeout_s: 1 });
  check("a background execute returns while the command runs", running.still_running === true, running);
  note(await fails(client, "SESSION_BUSY", "session_destroy", { session_id: busy.session_id }));
  const gone = await ok(client, "session_destroy", { session_id: busy.session_id, force: true });
  check("force destroys a busy session", gone.destroyed === true, gone);
  return covered;
}

async function engineUnavailable() {
  const { client, close } = await stdioClient({ DOCKER_HOST: "unix:///nonexistent/sandbox-conformance.sock" });
  try {
    const error = await fails(client, "ENGINE_UNAVAILABLE", "session_create", { project_path: PROJECT });
    return error.code;
  } finally {
    await close();
  }
}

async function main() {
  const mode = process.argv[2];
  if (!PROJECT) throw new Error("set CONFORMANCE_PROJECT");
  const { client, close } = mode === "http" ? await httpClient() : await stdioClient();
  try {
    await tools(client, mode);
    const sid = await everyTool(client, mode);
    await progress(client, sid);
    await resetTimeoutOnProgress(client, sid);
    await cancellation(client, sid);
    const covered = await errors(client, sid, mode);
    covered.add(await engineUnavailable());
    for (const code of Object.keys(UNPROVOKABLE)) covered.add(code);
    const contract = ["INVALID_ARGUMENT", "PATH_NOT_ALLOWED", "SESSION_NOT_FOUND", "SESSION_LIMIT", "SESSION_EXITED", "SESSION_BUSY", "ENGINE_UNAVAILABLE", "IMAGE_NOT_FOUND", "INTERNAL"];
    check("every contract error code was seen", contract.every((c) => covered.has(c)), [...covered].sort());
    const gone = await ok(client, "session_destroy", { session_id: sid, force: true });
    check("session_destroy", gone.destroyed === true, gone);
  } finally {
    await close();
  }
  console.log(JSON.stringify({ done: mode, unprovokable: UNPROVOKABLE }));
}

main().catch((e) => {
  console.error(e?.stack ?? String(e));
  process.exit(1);
});
