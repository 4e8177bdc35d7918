// The package's published shape: `npm pack` packs the compiled SDK with its
// type declarations, and its "exports" resolve (a self-reference by name).
import { it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const pkgDir = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

it("package_exports", async () => {
  const out = JSON.parse(execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], { cwd: pkgDir, encoding: "utf8" }));
  const files: string[] = out[0].files.map((f: { path: string }) => f.path);
  for (const f of ["package.json", "README.md", "dist/src/index.js", "dist/src/index.d.ts", "dist/src/gen/coordd.d.ts"]) {
    assert.ok(files.includes(f), `${f} is packed: ${files.join(" ")}`);
  }
  assert.ok(!files.some((f) => f.startsWith("dist/test/")), "no tests in the package");
  const sdk = await import("@coordd/client");
  for (const name of ["Client", "CoorddError", "NotAcquiredError", "LeaseLostError", "Worker", "isReason", "permanent"]) {
    assert.equal(typeof (sdk as Record<string, unknown>)[name], "function", name);
  }
});
