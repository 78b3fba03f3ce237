#!/usr/bin/env bash
# The report page in a real browser: headless Chromium (Debian's `chromium`) loads the page
# `ipuxla report` writes for the transformer bench case, with no console messages, and its
# DOM shows the profile's numbers; the screenshot is kept as target/report-screenshot.png.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  sudo_=""
  if [ "$(id -u)" != 0 ]; then sudo_="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo_ apt-get install -y -q chromium \
    || { $sudo_ apt-get update -q && $sudo_ apt-get install -y -q chromium; }
fi

out=target/report-check
rm -rf "$out" && mkdir -p "$out"
bin=target/release/ipuxla
$bin run fixtures/conformance/bench_transformer_fwd_bwd/module.hlo --estimate-only -q \
  --profile "$out/profile.json" --trace "$out/trace.json" >/dev/null
$bin report "$out/profile.json" -o "$out/report.html" --title "bench_transformer_fwd_bwd" >/dev/null
page="file://$(pwd)/$out/report.html"
browser() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "$@"
}
browser --enable-logging=stderr --v=0 --dump-dom "$page" >"$out/dom.html" 2>"$out/console.log"
if grep -q "CONSOLE" "$out/console.log"; then
  echo "the report page logged to the console:"; grep "CONSOLE" "$out/console.log"; exit 1
fi
total=$(grep -m1 -o '"total_cycles": [0-9]*' "$out/profile.json" | grep -o '[0-9]*$')
grep -q "id=\"total-cycles\">$total<" "$out/dom.html" \
  || { echo "the rendered page does not show total_cycles $total"; exit 1; }
grep -q 'id="peak-live-bytes">[0-9]' "$out/dom.html" \
  || { echo "the rendered page has no liveness peak"; exit 1; }
largest=$(awk '/id="largest-tensors"/{f=1} f{print} f&&/<\/table>/{exit}' "$out/dom.html")
[ "$(grep -o '<td class="name">' <<<"$largest" | wc -l)" -eq 20 ] \
  || { echo "the rendered page does not list the 20 largest tensors"; exit 1; }
grep -q 'id="peak-tile"' "$out/dom.html" \
  || { echo "the rendered page does not say what the busiest tile holds at its peak"; exit 1; }
browser --window-size=1000,1300 --screenshot="$(pwd)/target/report-screenshot.png" "$page" 2>/dev/null
[ -s target/report-screenshot.png ] || { echo "no screenshot"; exit 1; }
echo "report page rendered: $total cycles shown, screenshot in target/report-screenshot.png"
