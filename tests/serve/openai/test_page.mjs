// test_page.mjs - the chat page at / in headless Chromium (Debian's
// chromium): the page sends ?q=... through /v1/chat/completions with
// stream on, and the answer it shows is the server's own greedy answer to
// that conversation.
import { spawnSync } from "node:child_process";
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
const profile = mkdtempSync(path.join(os.tmpdir(), "strata-chromium-"));
const r = spawnSync(chromium, ["--headless", "--no-sandbox", "--disable-gpu",
  "--no-first-run", `--user-data-dir=${profile}`, "--virtual-time-budget=20000", "--dump-dom",
  `${srv.base}/?q=${encodeURIComponent(q)}&max=20&temp=0`], { encoding: "utf8", timeout: 60000 });
rmSync(profile, { recursive: true, force: true });
const m = (r.stdout || "").match(/<div class="assistant" data-done="1" id="answer">([\s\S]*?)<\/div>/);
check(m, `the page shows a finished answer (${(r.stdout || "").slice(0, 200)} ${r.stderr.slice(-300)})`);
const shown = m ? m[1].replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&nbsp;/g, "\u00a0")
  .replace(/&amp;/g, "&") : null;
equal(shown, want.choices[0].message.content, "the page's answer = the server's greedy answer");
const metrics = await (await fetch(srv.base + "/metrics")).text();
check(/^strata_requests_streamed_total [1-9]/m.test(metrics), "the page streamed");
equal((await stopServer(srv)).code, 0, "SIGTERM exits 0");
finish("test_page");
