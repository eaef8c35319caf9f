// Headless Chromium check of the DevUI web page (run by tests/hosting/test_devui.py).
// Usage: node devui_browser.mjs <base url> <auth token> <message> <screenshot dir> <mode> [<typed answer>] <expected>
// Opens the page (the single agent is auto-selected), sends <message>, waits for the approval card, then
// answers: mode "approve" clicks Approve; mode "typed" types <typed answer> (the edited draft as JSON) into the
// message box and sends it. Waits for <expected> on the page and exits 0, else 1. Screenshots (small PNGs):
// devui_<mode>_request.png (the card with the request data) and devui_<mode>_answered.png, or
// devui_<mode>_failure.png. The page reads its bearer token from localStorage "devui_auth_token".
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, token, message, shotDir, mode, ...rest] = process.argv.slice(2);
const expected = rest.at(-1);
const typed = mode === "typed" ? rest[0] : undefined;
if (!base || !token || !message || !shotDir || !["approve", "typed"].includes(mode) || !expected) {
  console.error("usage: node devui_browser.mjs <base url> <token> <message> <shot dir> approve|typed [<answer>] <expected>");
  process.exit(2);
}
const profile = mkdtempSync(join(tmpdir(), "devui-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
  viewport: { width: 1100, height: 720 },
});
let ok = false;
try {
  await context.addInitScript((t) => localStorage.setItem("devui_auth_token", t), token);
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => console.log("  pageerror:", String(err).slice(0, 200)));
  await page.goto(base, { waitUntil: "networkidle" });
  const box = page.locator("textarea").first();
  await box.waitFor({ timeout: 30000 });
  await box.fill(message);
  await box.press("Enter");
  await page.getByText("Approval Required").first().waitFor({ timeout: 30000 });
  console.log("  approval card shown");
  await page.screenshot({ path: join(shotDir, `devui_${mode}_request.png`) });
  if (mode === "approve") {
    await page.getByRole("button", { name: "Approve" }).first().click();
  } else {
    await box.fill(typed);
    await box.press("Enter");
    console.log("  typed answer sent");
  }
  await page.getByText(expected).first().waitFor({ timeout: 30000 });
  console.log(`  final text shown: ${expected}`);
  await page.screenshot({ path: join(shotDir, `devui_${mode}_answered.png`) });
  ok = true;
} catch (err) {
  console.log("  FAILED:", String(err?.message ?? err).split("\n")[0]);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: join(shotDir, `devui_${mode}_failure.png`) });
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(ok ? "DEVUI BROWSER CHECK: PASS" : "DEVUI BROWSER CHECK: FAIL");
process.exit(ok ? 0 : 1);
