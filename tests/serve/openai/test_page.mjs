// test_page.mjs - the chat page at / in headless Chromium (Debian's
// chromium), driven over the DevTools protocol on a pipe: the page sends
// ?q=... through /v1/chat/completions with stream on, and the answer it
// shows, once it says it is done, is the server's own greedy answer to
// that conversation.
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SKIP, TEMPLATE, check, equal, finish, requireServer, startServer,
  stopServer } from "./lib.mjs";

requireServer(false);
const chromium = ["chromium", "chromium-browser"].find(c =>
  spawnSync(c, ["--version"], { encoding: "utf8" }).status === 0);
if (!chromium) {
  console.log("skipped: no chromium (scripts/setup installs it)");
  process.exit(SKIP);
}
const srv = await startServer(["--chat-template", TEMPLATE]);
const page = await fetch(srv.base + "/");
equal(page.status, 200, "GET /");
check((page.headers.get("content-type") || "").startsWith("text/html"), "the page is HTML");
const q = "Tell me a story";
const want = await (await fetch(srv.base + "/v1/chat/completions", { method: "POST",
  body: JSON.stringify({ messages: [{ role: "user", content: q }], max_tokens: 20, temperature: 0 }) }))
  .json();
// Opens url in headless Chromium and polls expression in the page until it
// gives a string (or 60 s pass): the DevTools protocol over
// --remote-debugging-pipe (commands on fd 3, answers on fd 4, each message
// ended by a NUL).
async function evaluateWhenReady(url, expression) {
  const profile = mkdtempSync(path.join(os.tmpdir(), "strata-chromium-"));
  const proc = spawn(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
    "--remote-debugging-pipe", `--user-data-dir=${profile}`, url],
    { stdio: ["ignore", "ignore", "ignore", "pipe", "pipe"] });
  const exited = new Promise(res => proc.on("exit", res));
  const pending = new Map();
  let buf = "", next = 1;
  proc.stdio[4].on("data", d => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\0")) >= 0) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (msg.id && pending.has(msg.id)) {
        pending.get(msg.id)(msg);
        pending.delete(msg.id);
      }
    }
  });
  const call = (method, params = {}, sessionId) => new Promise(res => {
    const id = next++;
    pending.set(id, res);
    proc.stdio[3].write(JSON.stringify({ id, method, params, sessionId }) + "\0");
  });
  let value = null;
  try {
    const deadline = Date.now() + 60000;
    let target = null;
    while (!target && Date.now() < deadline) {
      const t = await call("Target.getTargets");
      target = (t.result?.targetInfos ?? []).find(x => x.type === "page");
      if (!target) await new Promise(r => setTimeout(r, 100));
    }
    const { result } = await call("Target.attachToTarget", { targetId: target.targetId, flatten: true });
    while (value === null && Date.now() < deadline) {
      const r = await call("Runtime.evaluate", { expression, returnByValue: true }, result.sessionId);
      const v = r.result?.result?.value;
      if (typeof v === "string") value = v;
      else await new Promise(r => setTimeout(r, 100));
    }
    await call("Browser.close");
  } finally {
    proc.kill();
    await exited;
    // Chromium's helper processes can still write to the profile after
    // the browser exits (make check under load: ENOTEMPTY after 5 tries);
    // leftover temporary files are not what this test checks.
    try {
      rmSync(profile, { recursive: true, force: true, maxRetries: 40, retryDelay: 250 });
    } catch (e) {
      console.warn(`left ${profile}: ${e.code}`);
    }
  }
  return value;
}

const shown = await evaluateWhenReady(`${srv.base}/?q=${encodeURIComponent(q)}&max=20&temp=0`,
  "(() => { const a = document.querySelector('#answer[data-done=\"1\"]');" +
  " return a && a.className === 'assistant' ? a.textContent : null; })()");
check(shown !== null, "the page shows a finished answer");
equal(shown, want.choices[0].message.content, "the page's answer = the server's greedy answer");
const metrics = await (await fetch(srv.base + "/metrics")).text();
check(/^strata_requests_streamed_total [1-9]/m.test(metrics), "the page streamed");
equal((await stopServer(srv)).code, 0, "SIGTERM exits 0");
finish("test_page");
