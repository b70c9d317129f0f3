"""`POST /attention` at its limit: answer size, server memory and `/health` while it works.

    python benchmarks/serve_attention.py CHECKPOINT --clients 10 \
        --json benchmarks/results/serve_attention.json

Starts `translate serve CHECKPOINT` (CPU), sends one translation to warm it up, notes its
resident memory, then sends `--clients` requests at once for the attention of the longest
accepted input (a word repeated up to `--max-attention-pieces` pieces), while another client
asks `/health` every 0.1 s. Printed: each answer's status and size, the server's memory growth,
the time for all of them and the slowest `/health`. An untrained model of the recipe's size is
the worst case: it decodes to the length limit, so every matrix is as large as it gets.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--word", default="dog")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/serve_attention.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import httpx

    from translate.loading import load_checkpoint
    from translate.serve import ServeConfig
    from translate.serve.process import ServerProcess
    from translate.hardware import cpu_name

    limit = ServeConfig().max_attention_pieces
    tokenizer = load_checkpoint(args.checkpoint).tokenizer
    words = max(n for n in range(1, 2 * limit)
                if len(tokenizer.encode_src([" ".join([args.word] * n)])[0]) <= limit)
    text = " ".join([args.word] * words)
    server = ServerProcess(args.checkpoint, "--device", "cpu")
    try:
        httpx.post(server.url + "translate", json={"text": "A dog runs."}, timeout=120)
        before = server.rss_mb()
        answers: list[tuple[int, int]] = []
        health: list[float] = []
        done = threading.Event()

        def ask() -> None:
            answer = httpx.post(server.url + "attention", json={"text": text}, timeout=3600)
            answers.append((answer.status_code, len(answer.content)))

        def poll() -> None:
            while not done.is_set():
                start = time.perf_counter()
                httpx.get(server.url + "health", timeout=60)
                health.append(time.perf_counter() - start)
                time.sleep(0.1)

        poller = threading.Thread(target=poll)
        poller.start()
        start = time.perf_counter()
        clients = [threading.Thread(target=ask) for _ in range(args.clients)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        seconds = time.perf_counter() - start
        done.set()
        poller.join()
        result = {"checkpoint": str(args.checkpoint), "cpu": cpu_name(), "pieces_limit": limit,
                  "words": words, "clients": args.clients, "statuses": sorted({s for s, _ in
                                                                                answers}),
                  "answer_mib": max(size for _, size in answers) / 2 ** 20,
                  "rss_before_mib": before, "rss_growth_mib": server.rss_mb() - before,
                  "seconds": seconds, "health_slowest_s": max(health, default=float("nan")),
                  "health_polls": len(health)}
    finally:
        server.stop()
    print(json.dumps(result, indent=2))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
