#!/usr/bin/env bash
# Renders every ```mermaid block of docs/*.md to SVG with mermaid-cli on the
# system Chromium, into a temporary directory; fails if any block does not
# parse. Usage: docs/render.sh [OUTDIR] (the SVGs are kept there when given).
set -euo pipefail
cd "$(dirname "$0")"
MMDC_VERSION=11.12.0
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "render.sh: no Chromium at $CHROMIUM (set CHROMIUM=)" >&2; exit 1; }
command -v npx >/dev/null || { echo "render.sh: npx (Node.js) needed" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=${1:-$work/svg}
mkdir -p "$out" "$work/src"

# One .mmd file per block: page-N.mmd for the Nth block of page.md.
for page in *.md; do
	awk -v dir="$work/src" -v base="${page%.md}" '
		/^```mermaid[[:space:]]*$/ { n++; f = sprintf("%s/%s-%d.mmd", dir, base, n); inblock = 1; next }
		inblock && /^```[[:space:]]*$/ { inblock = 0; close(f); next }
		inblock { print > f }
	' "$page"
done
set -- "$work"/src/*.mmd
[ -e "$1" ] || { echo "render.sh: no mermaid blocks in docs/*.md" >&2; exit 1; }

printf '{"executablePath": "%s", "args": ["--no-sandbox", "--disable-gpu"]}\n' "$CHROMIUM" >"$work/puppeteer.json"
export PUPPETEER_SKIP_DOWNLOAD=1
mmdc() { npx -y "@mermaid-js/mermaid-cli@$MMDC_VERSION" -q -p "$work/puppeteer.json" "$@"; }

# Fast path: every block in one Markdown file, one browser.
for src in "$@"; do printf '```mermaid\n%s\n```\n\n' "$(cat "$src")"; done >"$work/all.md"
if mmdc -i "$work/all.md" -o "$work/all.out.md" >"$work/all.log" 2>&1; then
	i=0
	for src in "$@"; do
		i=$((i + 1))
		mv "$work/all.out-$i.svg" "$out/$(basename "$src" .mmd).svg"
	done
	echo "render.sh: rendered $# diagrams from docs/*.md into $out"
	exit 0
fi

# Something failed: render each block alone to name the ones that do not parse.
failed=0
for src in "$@"; do
	name=$(basename "$src" .mmd)
	if ! mmdc -i "$src" -o "$out/$name.svg" >"$work/$name.log" 2>&1; then
		echo "render.sh: $name (block ${name##*-} of ${name%-*}.md) does not render:" >&2
		grep -v '^ *at ' "$work/$name.log" | sed 's/^/  /' >&2
		failed=1
	fi
done
if [ "$failed" = 0 ]; then
	echo "render.sh: every block renders alone but not together:" >&2
	sed 's/^/  /' "$work/all.log" >&2
fi
exit 1
