"""Fairness of `translate serve`: how long a one-sentence request waits behind a big one.

    python benchmarks/serve_fairness.py CHECKPOINT --data ../shared/data/multi30k \
        --rounds 3 --json benchmarks/results/serve_fairness.json

Starts `translate serve CHECKPOINT` twice on free ports: as configured by default (calls of at
most `--max-call-work` source pieces x beam, a big request decoded in parts with others served
between them) and its peer with one call per request group (`--max-call-work` and
`--max-request-work` far above any request: the big request holds the model until it is done).
In each round, on each server in turn (the order alternating round by round): a big request
(the split's `--big` longest source sentences at beam `--big-beam`) is sent, and `--after`
seconds later a small one (one short sentence at beam 1), while a third client asks `/health`
every 0.2 s. Printed per server and round: the small request's latency, the big one's, and the
slowest `/health` answer; then their medians over the rounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
UNSPLIT = ["--max-call-work", "100000000", "--max-request-work", "100000000"]


def one_round(url: str, big: list[str], big_beam: int, small: str, after: float) -> dict:
    """The big request, the small one `after` seconds later, and /health polled meanwhile."""
    import httpx

    times: dict = {}
    health: list[float] = []
    done = threading.Event()

    def send(name: str, body: dict) -> None:
        start = time.perf_counter()
        answer = httpx.post(url + "translate", json=body, timeout=3600)
        times[name] = (time.perf_counter() - start, answer.status_code)

    def poll() -> None:
        while not done.is_set():
            start = time.perf_counter()
            httpx.get(url + "health", timeout=60)
            health.append(time.perf_counter() - start)
            time.sleep(0.2)

    threads = [threading.Thread(target=send, args=("big", {"texts": big, "beam": big_beam})),
               threading.Thread(target=poll)]
    for thread in threads:
        thread.start()
    time.sleep(after)
    send("small", {"text": small, "beam": 1})
    threads[0].join()
    done.set()
    threads[1].join()
    return {"small_s": times["small"][0], "small_status": times["small"][1],
            "big_s": times["big"][0], "big_status": times["big"][1],
            "health_max_s": max(health, default=float("nan"))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--data", default="../shared/data/multi30k")
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--big", type=int, default=64, help="sentences in the big request")
    ap.add_argument("--big-beam", type=int, default=16)
    ap.add_argument("--after", type=float, default=2.0, help="seconds before the small request")
    ap.add_argument("--long", type=int, default=1,
                    help="each big sentence repeated this many times (longer sentences)")
    ap.add_argument("--max-call-work", type=int, default=None,
                    help="the budgeted server's --max-call-work (default: translate's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--servers", default="budgeted,unsplit",
                    help="which servers to time: budgeted (the defaults), unsplit, or both")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/serve_fairness.json"))
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from translate.config import DataConfig
    from translate.data.read import load_split
    from translate.serve.process import running
    from translate.hardware import cpu_name

    src, _ = load_split(DataConfig(dataset=args.data), args.split)
    big = [" ".join([s] * args.long) for s in sorted(src, key=len, reverse=True)[: args.big]]
    small = min(src, key=len)
    budget = [] if args.max_call_work is None else ["--max-call-work", str(args.max_call_work)]
    servers = {"budgeted": budget, "unsplit": UNSPLIT}
    chosen = args.servers.split(",")
    results: dict[str, list[dict]] = {name: [] for name in chosen}
    with ExitStack() as stack:
        urls = {name: stack.enter_context(running(args.checkpoint, "--device", "cpu",
                                                  *servers[name], timeout=600))
                for name in chosen}
        for r in range(args.rounds):
            for name in chosen if r % 2 == 0 else reversed(chosen):
                result = one_round(urls[name], big, args.big_beam, small, args.after)
                results[name].append(result)
                print(f"round {r + 1} {name:9s}: small {result['small_s']:6.2f} s "
                      f"({result['small_status']}), big {result['big_s']:7.1f} s "
                      f"({result['big_status']}), slowest /health {result['health_max_s']:.2f} s",
                      flush=True)
    summary = {name: {key: statistics.median(r[key] for r in rounds)
                      for key in ("small_s", "big_s", "health_max_s")}
               for name, rounds in results.items()}
    for name, figures in summary.items():
        print(f"median {name:9s}: small {figures['small_s']:.2f} s, big {figures['big_s']:.1f} s,"
              f" slowest /health {figures['health_max_s']:.2f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({
        "checkpoint": str(args.checkpoint), "split": args.split, "big": args.big,
        "big_beam": args.big_beam, "long": args.long, "max_call_work": args.max_call_work,
        "after_s": args.after, "cpu": cpu_name(),
        "python": platform.python_version(), "rounds": results, "medians": summary}, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
