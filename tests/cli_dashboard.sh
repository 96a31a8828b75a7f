#!/usr/bin/env bash
# `cformers dashboard`: misuse exits 2, a missing log directory or Chart.js exits 1 naming
# it; served over two runs, /api/runs lists them, /api/metrics gives a run's lines, an
# unknown run is 404 and a POST 405; in a real browser (headless Chromium, where
# installed) the page loads Chart.js from the server, logs nothing to the console and draws
# every run's points and the memory plan's blocks, and a screenshot has the runs' colours
# drawn (tools/png_pixels.py); the live page (polling) keeps every canvas's height over 15 s and
# its screenshot has the runs drawn; `train --dashboard` serves a run while it trains, and new
# steps show; a trained run's memory_plan.json is served.
source "$(dirname "$0")/lib_cli.sh"
chart=/usr/share/javascript/chart.js/chart.min.js
[ -f "$chart" ] || { echo "SKIP: no $chart (Debian's libjs-chart.js)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }

check "no --logdir" 2 "$bin" dashboard
check "bad --port" 2 "$bin" dashboard --logdir "$tmp" --port http
check "missing log directory" 1 "$bin" dashboard --logdir "$tmp/none" --port 0
stderr_has "the directory is named" "$tmp/none"
check "missing Chart.js" 1 "$bin" dashboard --logdir "$tmp" --port 0 --chart-js "$tmp/chart.js"
stderr_has "Chart.js is named" "$tmp/chart.js"

mkdir -p "$tmp/logs/a" "$tmp/logs/sweep/b"
for run in a sweep/b; do
    for s in 1 2 3 4 5 6; do
        echo "{\"event\":\"train\",\"time\":1.0,\"step\":$s,\"loss\":$((10 - s)).5,\"lr\":0.001,\"grad_norm\":1.0,\"tokens_per_s\":1000.0,\"step_seconds\":0.5}"
    done >"$tmp/logs/$run/metrics.jsonl"
    echo '{"event":"eval","time":2.0,"step":6,"val_loss":4.0}' >>"$tmp/logs/$run/metrics.jsonl"
done
echo '{"arena_bytes":3145728,"nodes":10,"backward_from":4,"optimizer_from":9,"blocks":[[0,1048576,0,7,"x"],[1048576,2097152,1,2,"h"],[1048576,1048576,5,6,"workspace of matmul"]]}' \
    >"$tmp/logs/a/memory_plan.json"

"$bin" dashboard --logdir "$tmp/logs" --port 0 >"$tmp/server.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
server_url "$tmp/server.out" "cli dashboard"
url="$url/"

check "runs" 0 curl -sf "${url}api/runs"
stdout_has "both runs listed" '"runs":\["a","sweep/b"\]'
check "a run's metrics" 0 curl -sf "${url}api/metrics?run=sweep/b"
[ "$(grep -c '"event"' "$tmp/out")" = 7 ] || fail_because "/api/metrics did not give the run's 7 lines"
[ "$(curl -s -o /dev/null -w '%{http_code}' "${url}api/metrics?run=../a")" = 404 ] || fail_because "an unknown run is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url")" = 405 ] || fail_because "POST is not 405"
[ "$(curl -s -o /dev/null -w '%{http_code}' "${url}chart.js")" = 200 ] || fail_because "Chart.js is not served"
check "a run's memory plan" 0 curl -sf "${url}api/memory_plan?run=a"
stdout_has "the plan's blocks" '"workspace of matmul"'
[ "$(curl -s -o /dev/null -w '%{http_code}' "${url}api/memory_plan?run=sweep/b")" = 404 ] ||
    fail_because "a run without a memory plan is not 404"

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
    echo "SKIP (part): no Chromium for the browser check (apt-get install chromium)"
else
    # ?once: one poll, no timers, so the virtual time budget can run out.
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --virtual-time-budget=10000 \
        --enable-logging=stderr --v=0 --dump-dom "${url}?once" >"$tmp/dom.html" 2>"$tmp/browser.log"
    grep -q ':CONSOLE' "$tmp/browser.log" && { fail_because "the page logged to the console"; grep ':CONSOLE' "$tmp/browser.log"; }
    # 2 runs x (6 losses + 1 validation loss + 6 lr + 6 tokens/s + 6 grad norms + 6 step times)
    grep -q 'data-points="62"' "$tmp/dom.html" && grep -q 'data-runs="2"' "$tmp/dom.html" ||
        { fail_because "the page did not draw both runs' points"; grep -o '<body[^>]*>' "$tmp/dom.html"; grep -o 'id="status">[^<]*' "$tmp/dom.html"; }
    grep -q 'data-plan-blocks="3"' "$tmp/dom.html" || fail_because "the memory plan panel did not get run a's 3 blocks"
    grep -q 'data-overflow="false"' "$tmp/dom.html" || fail_because "the page is wider than an 1400 px window"
    # the narrowest window headless Chromium gives: the panels stack in one column, no overflow
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --virtual-time-budget=10000 \
        --window-size=380,900 --dump-dom "${url}?once" >"$tmp/narrow.html" 2>/dev/null
    grep -q 'data-overflow="false"' "$tmp/narrow.html" ||
        { fail_because "the page is wider than the narrowest window (headless Chromium widens 380 px to ~485)"; grep -o '<body[^>]*>' "$tmp/narrow.html"; }
    # screenshot PAGE BUDGET_MS: a 1400 x 1200 screenshot of PAGE after BUDGET_MS of virtual
    # time has run a's lines (#1f77b4) and run b's (#d62728, the page's COLORS) drawn.
    screenshot() {
        rm -f "$tmp/dashboard.png"
        timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --virtual-time-budget="$2" \
            --window-size=1400,1200 --screenshot="$tmp/dashboard.png" "$1" >/dev/null 2>&1
        [ -s "$tmp/dashboard.png" ] || { fail_because "no screenshot of $1"; return; }
        /usr/bin/python3 "$src/tools/png_pixels.py" "$tmp/dashboard.png" '#1f77b4' '#d62728' >"$tmp/pixels" ||
            fail_because "tools/png_pixels.py could not read the screenshot of $1"
        awk '$1 == "#1f77b4" && $2 < 500 || $1 == "#d62728" && $2 < 500 || $1 == "saturated" && $2 < 3000 { bad = 1 }
             END { exit bad }' "$tmp/pixels" || { fail_because "the screenshot of $1 lacks drawn series"; cat "$tmp/pixels"; }
    }
    screenshot "${url}?once" 10000
    # The live page (polling every 2 s, Chart.js resizing each canvas to its box) for 15 s of
    # virtual time: every canvas keeps the height of the first draw (it once grew without end).
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --virtual-time-budget=15000 \
        --window-size=1400,1200 --dump-dom "$url" >"$tmp/live.html" 2>/dev/null
    attr() { grep -o "data-$1=\"[^\"]*\"" "$tmp/live.html" | head -1 | sed 's/.*="//; s/"$//'; }
    first=$(attr first-canvas-heights)
    last=$(attr canvas-heights)
    draws=$(attr draws)
    [ "${draws:-0}" -ge 5 ] || fail_because "the live page drew ${draws:-0} times in 15 s (polls every 2 s)"
    [ -n "$first" ] && [ "$first" = "$last" ] ||
        fail_because "the live page's canvases changed height: first draw $first, after 15 s $last"
    for h in ${last//,/ }; do
        [ "$h" -ge 100 ] && [ "$h" -le 260 ] || fail_because "a live canvas is $h px tall (its box is 240 px)"
    done
    screenshot "$url" 15000
fi

# train --dashboard: the run's own page, live.
tiny_run --output_dir="$tmp/live" --runner_config.train_steps=100000 --runner_config.save_interval=0
"$bin" train "${tiny[@]}" --dashboard 0 --quiet >"$tmp/train.out" 2>&1 &
trainer=$!
trap 'kill $server $trainer 2>/dev/null; rm -rf "$tmp"' EXIT
server_url "$tmp/train.out" "cli dashboard"
live="$url/"
steps() { curl -sf "${live}api/metrics?run=." | grep -c '"event":"train"'; }
if [ -z "$live" ]; then
    fail_because "train --dashboard printed no address"; cat "$tmp/train.out"
else
    sleep 2
    first=$(steps)
    sleep 2
    second=$(steps)
    [ "${second:-0}" -gt "${first:-0}" ] || fail_because "no new steps while training ($first, then $second)"
    curl -sf "${live}api/memory_plan?run=." | grep -q '"backward_from"' || fail_because "the run's memory plan is not served"
fi
kill -INT $trainer 2>/dev/null
wait $trainer 2>/dev/null
finish "cli dashboard"
