// Headless Chromium on DevUI's Traces panel after an approval (run by tests/hosting/test_devui_traces.py).
// Usage: node devui_traces.mjs <base url> <auth token> <message> <screenshot path>
// Sends <message>, clicks Approve on the approval card, waits for "deployed: <message>", opens the
// Traces panel, waits until it lists the two turns (the pause and the resume), widens the panel and opens
// the continuation spans DevUI draws under each turn's invoke_agent span (issued in the pause's turn,
// accepted and spent in the resume's: DevUI draws span names and, for a leaf span, its attributes, never
// span events); prints "PANEL <json>" (the page's text) and "TRACES <json>" (the spans DevUI streamed to
// the page: response.trace.completed events of /v1/responses), saves the screenshot and exits 0, or 1.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, token, message, shot] = process.argv.slice(2);
const POINTS = [
  "functional_workflow.continuation.issued",
  "functional_workflow.continuation.accepted",
  "functional_workflow.continuation.spent",
];
if (!base || !token || !message || !shot) {
  console.error("usage: node devui_traces.mjs <base url> <auth token> <message> <screenshot path>");
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), "devui-traces-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1600, height: 1400 },
});
let ok = false;
try {
  await context.addInitScript((t) => localStorage.setItem("devui_auth_token", t), token);
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => console.log("  pageerror:", String(err).slice(0, 200)));
  const turns = [];
  page.on("response", async (response) => {
    if (!response.url().endsWith("/v1/responses") || response.request().method() !== "POST") return;
    const spans = [];
    for (const line of (await response.text()).split("\n")) {
      if (!line.startsWith("data:") || !line.includes("response.trace.completed")) continue;
      const data = JSON.parse(line.slice(5)).data ?? {};
      spans.push({ name: data.operation_name, attributes: data.attributes ?? {}, events: data.events ?? [] });
    }
    turns.push(spans);
  });
  await page.goto(base, { waitUntil: "networkidle" });
  const box = page.locator("textarea").first();
  await box.waitFor({ timeout: 30000 });
  await box.fill(message);
  await box.press("Enter");
  await page.getByText("Approval Required").first().waitFor({ timeout: 30000 });
  console.log("  approval card shown");
  await page.getByRole("button", { name: "Approve" }).first().click();
  await page.getByText(`deployed: ${message}`).first().waitFor({ timeout: 30000 });
  console.log("  final text shown");
  await page.getByRole("tab", { name: /Traces/ }).first().click();
  await page.getByText("2 turns").first().waitFor({ timeout: 30000 });
  // Widen the side panel (drag its divider left) so span names and attributes are readable.
  const divider = page.locator("[class*='cursor-col-resize']").first();
  if (await divider.count()) {
    const area = await divider.boundingBox();
    if (area) {
      await page.mouse.move(area.x + area.width / 2, area.y + area.height / 2);
      await page.mouse.down();
      await page.mouse.move(620, area.y + area.height / 2, { steps: 8 });
      await page.mouse.up();
    }
  }
  // The continuation points are child spans of each turn's invoke_agent span (DevUI draws spans, not
  // span events); a leaf span's attributes show when its row's toggle is clicked.
  const shown = [];
  for (const name of POINTS) {
    const badge = page.getByText(name, { exact: true }).first();
    await badge.waitFor({ timeout: 30000 });
    await badge.locator("xpath=..").locator("button").first().click();
    shown.push(name);
  }
  await page.getByText("continuation_token_hash").first().waitFor({ timeout: 10000 });
  await page.waitForTimeout(300);
  const panel = await page.locator("body").innerText();
  console.log(`PANEL ${JSON.stringify({ shown, text: panel })}`);
  console.log(`TRACES ${JSON.stringify(turns)}`);
  await page.screenshot({ path: shot, fullPage: true });
  ok = true;
} catch (err) {
  console.log("  FAILED:", String(err?.message ?? err).split("\n")[0]);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: shot.replace(/\.png$/, "_failure.png"), fullPage: true });
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(ok ? "DEVUI TRACES CHECK: PASS" : "DEVUI TRACES CHECK: FAIL");
process.exit(ok ? 0 : 1);
