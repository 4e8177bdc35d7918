#!/usr/bin/env bash
# The Python SDK's tests: builds bin/coordd, checks that the package installs
# offline (pip install --no-index --no-build-isolation into a venv, with
# Debian's setuptools and wheel), then runs the conformance scenarios
# (sdk/CONFORMANCE.md) with unittest against real 3-node clusters the
# tests start on 127.0.0.1 (about 15 s). Extra arguments go to unittest
# (e.g. -k frozen).
#   PYTHON=python3.11 sdk/python/test.sh     # another interpreter (default: Debian's /usr/bin/python3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
py=${PYTHON:-$( [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3 )}

# Debian's packages the install check needs, when missing and we are root
# (apt's output shown only if it fails). No PyPI: the SDK has no dependency.
if ! "$py" -c 'import ensurepip, setuptools, wheel' 2>/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "sdk/python/test.sh: installing python3-venv python3-setuptools python3-wheel python3-pip with apt-get"
  log=$(mktemp)
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3-venv python3-setuptools python3-wheel python3-pip; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi

# coordd for the clusters, coordctl for the TLS test's development certificates.
(cd "$root" && go build -o bin/ ./cmd/coordd ./cmd/coordctl)
export COORDD_BIN="$root/bin/coordd" COORDCTL_BIN="$root/bin/coordctl"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The install check: from a copy (a build writes build/ and *.egg-info next
# to the sources), into a venv that sees the system's setuptools and wheel.
"$py" -m venv --system-site-packages "$tmp/venv"
cp -r "$here" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src/"*.egg-info
if ! out=$("$tmp/venv/bin/pip" install -q --no-index --no-build-isolation "$tmp/src" 2>&1); then
  printf '%s\n' "$out" >&2
  echo "sdk/python/test.sh: pip install of the SDK failed (output above)" >&2
  exit 1
fi
(cd "$tmp" && "$tmp/venv/bin/python" -c 'import coordd, sys; assert coordd.__file__.startswith(sys.prefix), coordd.__file__')

# The type hints, where Debian's python3-mypy is installed.
if "$py" -m mypy --version >/dev/null 2>&1; then (cd "$here" && "$py" -m mypy --strict coordd); fi

cd "$here/tests"
"$py" -m unittest "$@"
