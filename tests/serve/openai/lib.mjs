// lib.mjs - what the server tests share: the paths CTest gives, starting
// strata serve on a free loopback port (read from its stdout), the official
// openai client from .deps/npm, strata run's greedy text, and small checks.
import { spawn, spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { existsSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export const STRATA = process.env.STRATA_BIN;
export const SRC = process.env.STRATA_SOURCE_DIR;
export const MODEL = path.join(SRC, "models/stories260K");
// stories260K with a chat template of its own (Mistral Nemo's)
export const CHAT_MODEL = path.join(SRC, "tests/data/chat-stories260K");
export const TEMPLATE = path.join(SRC,
  "tests/data/chat-templates/microsoft-Phi-3.5-mini-instruct.jinja");
export const SKIP = 77;

let failures = 0;
export function check(cond, what) {
  if (!cond) {
    failures++;
    console.error("FAIL: " + what);
  }
}
export function equal(got, want, what) {
  const g = JSON.stringify(got), w = JSON.stringify(want);
  check(g === w, `${what}: got ${g}, want ${w}`);
}
export function finish(name) {
  if (failures) {
    console.error(`${name}: ${failures} check(s) failed`);
    process.exit(1);
  }
  console.log(`${name}: all checks passed`);
  process.exit(0);
}

// The openai package from .deps/npm (scripts/npm-deps); null when absent.
export function openaiModule() {
  const dir = path.join(SRC, ".deps/npm/node_modules/openai");
  if (!existsSync(dir)) return null;
  const req = createRequire(path.join(SRC, ".deps/npm/package.json"));
  return req("openai");
}

// Exits 77 (skipped) when the build has no HTTP or the client is missing.
export function requireServer(needClient = true) {
  const probe = spawnSync(STRATA, ["serve", MODEL, "--port", "0",
    "--host", "not-an-address", "--device", "cpu"], { encoding: "utf8" });
  if (/built without HTTP/.test(probe.stderr)) {
    console.log("skipped: strata was built without libmicrohttpd");
    process.exit(SKIP);
  }
  if (needClient && !openaiModule()) {
    console.log("skipped: the openai client is not installed (scripts/npm-deps)");
    process.exit(SKIP);
  }
}

// Starts strata serve MODEL ARGS on a free port; resolves to
// {port, base, proc, stderr(), exited}.
export function startServer(args = [], model = MODEL) {
  const proc = spawn(STRATA, ["serve", model, "--port", "0", "--device", "cpu",
    "--threads", "1", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "", err = "";
  proc.stderr.on("data", d => { err += d; });
  const exited = new Promise(res => proc.on("exit", (code, sig) => res({ code, sig })));
  // a test that dies leaves no server behind
  process.on("exit", () => { if (proc.exitCode === null) proc.kill("SIGKILL"); });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start: " + err)), 20000);
    proc.stdout.on("data", d => {
      out += d;
      const m = out.match(/listening on http:\/\/([^\s]+):(\d+)/);
      if (m) {
        clearTimeout(timer);
        const port = Number(m[2]);
        resolve({ port, base: `http://127.0.0.1:${port}`, proc, exited,
          stderr: () => err });
      }
    });
    proc.on("exit", code => reject(new Error(`server exited ${code}: ${err}`)));
  });
}

export async function stopServer(s) {
  s.proc.kill("SIGTERM");
  return s.exited;
}

// strata run's greedy text for a prompt (its trailing newline dropped).
export function runGreedy(args) {
  const r = spawnSync(STRATA, ["run", MODEL, "--temperature", "0", "--device", "cpu",
    "--threads", "1", ...args], { encoding: "utf8" });
  if (r.status !== 0) throw new Error("strata run failed: " + r.stderr);
  return r.stdout.replace(/\n$/, "");
}

// strata template's rendering of messages (with the test template, or a
// model's own).
export function render(messages, template = TEMPLATE) {
  const f = path.join(os.tmpdir(), `strata-serve-test-${process.pid}.json`);
  writeFileSync(f, JSON.stringify(messages));
  const r = spawnSync(STRATA, ["template", template, "--messages", f,
    "--add-generation-prompt"], { encoding: "utf8" });
  unlinkSync(f);
  if (r.status !== 0) throw new Error("strata template failed: " + r.stderr);
  return r.stdout;
}

// strata tokenize's ids of a text, with no special tokens added.
export function tokenIds(text) {
  const r = spawnSync(STRATA, ["tokenize", MODEL, "-p", text, "--ids", "--no-special"],
    { encoding: "utf8" });
  if (r.status !== 0) throw new Error("strata tokenize failed: " + r.stderr);
  return r.stdout.trim().split(/\s+/).map(Number);
}

// The peak resident memory of a process in KiB (VmHWM).
export function peakRssKiB(pid) {
  const m = readFileSync(`/proc/${pid}/status`, "utf8").match(/VmHWM:\s+(\d+)/);
  return m ? Number(m[1]) : -1;
}

// Reads a server-sent event stream from a fetch response: the data lines.
export async function sseEvents(resp) {
  const text = await resp.text();
  return text.split("\n\n").filter(e => e.startsWith("data: ")).map(e => e.slice(6));
}
