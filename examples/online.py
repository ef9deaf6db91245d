"""Sparse embeddings from a running server: POST /pooling.

Start a server first (see README.md), then:

    python examples/online.py --url http://127.0.0.1:8000 --model bge-m3-tiny
"""

from __future__ import annotations

import argparse
import json
import urllib.request


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="bge-m3-tiny", help="the server's --served-model-name")
    args = parser.parse_args()

    body = {
        "model": args.model,
        "data": {"input": ["I love China", "hi, bge-m3"], "return_tokens": True},
    }
    request = urllib.request.Request(
        args.url + "/pooling",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        print(json.dumps(json.load(resp), indent=2))


if __name__ == "__main__":
    main()
