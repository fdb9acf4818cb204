#!/usr/bin/env bash
# The web view's browser libraries: npm ci in web/ (versions pinned by web/package-lock.json),
# then the files the page loads, with every bundled package's licence, copied into
# sandbox/web/static/vendor (shipped in the Python package; nothing is fetched at run time).
# Run it after changing web/package.json; tests/unit/test_web_assets.py checks the result.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v npm >/dev/null || { echo "[web] npm is needed: bash scripts/node.sh" >&2; exit 1; }
(cd web && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
nm=web/node_modules
out=sandbox/web/static/vendor
rm -rf "$out" && mkdir -p "$out/licenses"
cp "$nm/@xterm/xterm/lib/xterm.js" "$nm/@xterm/xterm/css/xterm.css" "$out/"
cp "$nm/@xterm/addon-fit/lib/addon-fit.js" "$out/"
cp "$nm/asciinema-player/dist/bundle/asciinema-player.min.js" \
   "$nm/asciinema-player/dist/bundle/asciinema-player.css" "$out/"
# every package in the lock (the player bundles its dependencies): its licence and version
node -e '
const fs = require("fs");
const lock = JSON.parse(fs.readFileSync("web/package-lock.json", "utf8"));
const versions = {};
for (const [path, meta] of Object.entries(lock.packages)) {
  if (!path) continue;
  const name = path.replace(/^node_modules\//, "");
  versions[name] = { version: meta.version, license: meta.license };
  const dir = "web/" + path;
  const file = fs.readdirSync(dir).find((f) => /^licen[cs]e/i.test(f));
  if (!file) throw new Error("no licence file in " + dir);
  fs.copyFileSync(dir + "/" + file, "'"$out"'/licenses/" + name.replace("/", "__") + ".txt");
}
fs.writeFileSync("'"$out"'/VERSIONS.json", JSON.stringify(versions, null, 2) + "\n");
'
echo "[web] $(ls "$out/licenses" | wc -l) packages in $out" >&2
