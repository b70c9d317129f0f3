"""Load on `translate serve`: many clients at once, against the server batching and not.

    python benchmarks/serve_load.py RUN --data ../shared/data/multi30k --split test_2016_flickr \
        --clients 50 --seconds 30 --rounds 2 --json serve_load.json

Starts two `translate serve RUN` processes on free ports: one batching (`--batch-wait-ms`,
default 5, and `--max-batch`) and its peer with batching off (`--batch-wait-ms 0 --max-batch 1`:
one request a decoding call). In each of `--rounds` rounds the same load hits one server, then
the other, the order alternating round by round so the machine's drift hits both alike:
`--clients` clients (asyncio + httpx, in this process) each send one source sentence of the split
at a time, the next as soon as the answer comes, for `--seconds` seconds. Printed per server and
round: requests/s and sentences/s completed in the window, p50/p90/p99 latency and errors; then
batching's requests/s over its peer's in each round and their median. The clients share the
machine with the server: run it where nothing else runs, and compare only figures from one run.

A mixed load adds, beside the small clients, `--big-clients` that each send the split's `--big`
longest sentences at beam `--big-beam` again and again, and `--slow-clients` that each open a
connection, send half a request line and wait (and open another when the server closes it);
the figures above are still the small clients', and the big requests' count and median
latency are added:

    python benchmarks/serve_load.py RUN --clients 20 --big-clients 2 --slow-clients 100 \
        --seconds 30 --rounds 1 --json serve_load_mixed.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank q-th percentile of sorted values (nan for none)."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def stall(url: str, until: float) -> int:
    """Hold connections that send half a request line until `until`; how many were opened."""
    from urllib.parse import urlparse

    address, opened = urlparse(url), 0
    while time.perf_counter() < until:
        try:
            reader, writer = await asyncio.open_connection(address.hostname, address.port)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        opened += 1
        writer.write(b"GET /health HT")
        try:
            await asyncio.wait_for(reader.read(1), max(0.0, until - time.perf_counter()))
        except (asyncio.TimeoutError, OSError):
            pass
        writer.close()
    return opened


async def load(url: str, sentences: list[str], clients: int, seconds: float, beam: int,
               big: list[str] = (), big_clients: int = 0, big_beam: int = 16,
               slow_clients: int = 0) -> dict:
    """`clients` clients sending one sentence at a time for `seconds` (beside `big_clients`
    sending `big` at `big_beam` and `slow_clients` stalling); what the small clients
    measured, and the big requests' count and median latency."""
    import httpx

    done: list[tuple[float, float, bool]] = []  # (finished at, latency, answered 200)

    async def ask(http, text: str) -> bool:
        try:
            answer = await http.post(url + "translate", json={"text": text, "beam": beam})
            return answer.status_code == 200
        except httpx.HTTPError:
            return False

    async def client(http, first: int, until: float) -> None:
        i = first
        while time.perf_counter() < until:
            start = time.perf_counter()
            ok = await ask(http, sentences[i % len(sentences)])
            end = time.perf_counter()
            done.append((end, end - start, ok))
            i += clients

    bigs: list[tuple[float, bool]] = []

    async def big_client(http, until: float) -> None:
        while time.perf_counter() < until:
            start = time.perf_counter()
            try:
                answer = await http.post(url + "translate", json={"texts": list(big),
                                                                  "beam": big_beam})
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            bigs.append((time.perf_counter() - start, ok))

    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=clients + big_clients),
                                 timeout=600) as http:
        # warm-up, unmeasured: one request a client
        await asyncio.gather(*(ask(http, sentences[c % len(sentences)]) for c in range(clients)))
        until = time.perf_counter() + seconds
        stalled = await asyncio.gather(
            *(client(http, c, until) for c in range(clients)),
            *(big_client(http, until) for _ in range(big_clients)),
            *(stall(url, until) for _ in range(slow_clients)))
    window = [(lat, ok) for end, lat, ok in done if end <= until]
    latencies = sorted(lat for lat, ok in window if ok)
    big_latencies = sorted(lat for lat, ok in bigs if ok)
    return {"requests": len(window), "errors": sum(not ok for _, ok in window),
            "requests_per_s": len(latencies) / seconds, "sentences_per_s": len(latencies) / seconds,
            "p50_ms": 1000 * percentile(latencies, 50), "p90_ms": 1000 * percentile(latencies, 90),
            "p99_ms": 1000 * percentile(latencies, 99), "big_requests": len(big_latencies),
            "big_errors": sum(not ok for _, ok in bigs),
            "big_p50_ms": 1000 * percentile(big_latencies, 50),
            "stalled_connections": sum(n for n in stalled if n is not None)}


def table(rows: list[dict]) -> str:
    head = (f"{'server':<10} {'round':>5} {'requests/s':>11} {'sentences/s':>12} {'p50 ms':>8} "
            f"{'p90 ms':>8} {'p99 ms':>8} {'errors':>7}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['server']:<10} {r['round']:>5} {r['requests_per_s']:>11.1f} "
                     f"{r['sentences_per_s']:>12.1f} {r['p50_ms']:>8.0f} {r['p90_ms']:>8.0f} "
                     f"{r['p99_ms']:>8.0f} {r['errors']:>7}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run folder or a .pt checkpoint")
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/multi30k"))
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--rounds", type=int, default=2, help="each server measured this often")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--big-clients", type=int, default=0,
                    help="clients sending --big sentences at --big-beam, again and again")
    ap.add_argument("--big", type=int, default=64, help="sentences in a big request")
    ap.add_argument("--big-beam", type=int, default=16)
    ap.add_argument("--slow-clients", type=int, default=0,
                    help="clients that open a connection, send half a request line and wait")
    ap.add_argument("--batch-wait-ms", default="5", help="the batching server's wait")
    ap.add_argument("--max-batch", default="64", help="the batching server's sentence cap")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from translate.config import DataConfig
    from translate.data.read import load_split
    from translate.serve.process import running

    sentences = [s for s in load_split(DataConfig(dataset=args.data), args.split)[0] if s.strip()]
    big = sorted(sentences, key=len, reverse=True)[: args.big]
    common = ["--device", args.device, "--engine", args.engine,
              "--max-queue", str(max(256, args.clients)), "--max-beam", str(max(16, args.beam)),
              *(["--precision", args.precision] if args.precision else [])]
    peers = {"batched": ["--batch-wait-ms", args.batch_wait_ms, "--max-batch", args.max_batch],
             "unbatched": ["--batch-wait-ms", "0", "--max-batch", "1"]}
    rows = []
    with ExitStack() as stack:
        urls = {name: stack.enter_context(running(args.run, *common, *flags))
                for name, flags in peers.items()}
        for r in range(1, args.rounds + 1):
            order = list(peers) if r % 2 else list(reversed(peers))
            for name in order:
                print(f"round {r}: {name}, {args.clients} clients for {args.seconds:g} s",
                      file=sys.stderr)
                measured = asyncio.run(load(urls[name], sentences, args.clients, args.seconds,
                                            args.beam, big, args.big_clients, args.big_beam,
                                            args.slow_clients))
                rows.append({"server": name, "round": r, **measured})
    ratios = [b["requests_per_s"] / u["requests_per_s"] if u["requests_per_s"] else float("nan")
              for b in rows if b["server"] == "batched"
              for u in rows if u["server"] == "unbatched" and u["round"] == b["round"]]
    print(table(rows))
    if args.big_clients or args.slow_clients:
        for r in rows:
            print(f"{r['server']:<10} round {r['round']}: {r['big_requests']} big requests "
                  f"(median {r['big_p50_ms']:.0f} ms, {r['big_errors']} errors), "
                  f"{r['stalled_connections']} stalled connections")
    print("batched over unbatched, requests/s: "
          + ", ".join(f"round {i + 1} {x:.2f}x" for i, x in enumerate(ratios))
          + f"; median {statistics.median(ratios):.2f}x")
    if args.json:
        result = {"run": str(args.run), "split": args.split, "sentences": len(sentences),
                  "settings": {k: v for k, v in vars(args).items() if k not in ("json", "run")},
                  "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                  "rows": rows, "batched_over_unbatched": ratios,
                  "median_batched_over_unbatched": statistics.median(ratios)}
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
