#!/usr/bin/env bash
# The seed's request, with "task": "token_classify" as users already send it.
# Usage: examples/online_curl.sh [URL] [MODEL]
set -euo pipefail
URL=${1:-http://127.0.0.1:8000}
MODEL=${2:-bge-m3-tiny}
curl -sS -X POST "$URL/pooling" -H 'Content-Type: application/json' -d '{
  "model": "'"$MODEL"'", "task": "token_classify",
  "data": {"input": ["I love China", "hi, bge-m3"], "return_tokens": true}}'
echo
