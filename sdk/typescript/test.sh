#!/usr/bin/env bash
# The TypeScript SDK's tests (scripts/test.sh calls this): install the dev
# dependencies at the lockfile's versions, generate the OpenAPI types, build,
# and run the conformance scenarios (sdk/CONFORMANCE.md) with node's test
# runner against a 3-node cluster of real coordd processes the tests start
# (bin/coordd, built here). About 20 s.
set -euo pipefail
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "sdk/typescript/test.sh: node and npm are needed (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "sdk/typescript/test.sh: Node.js 20 or later is needed (found $(node --version))" >&2
  exit 1
fi
npm ci --no-audit --no-fund --loglevel=error
npm run --silent build
(cd "$root" && go build -o bin/ ./cmd/coordd)
COORDD_BIN="$root/bin/coordd" node --test --test-concurrency=1 dist/test/*.test.js
