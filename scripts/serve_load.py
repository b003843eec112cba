#!/usr/bin/env python3
"""A small load generator for a running `deltabit serve`, standard library only.

  serve_load.py PORT [--clients 8] [--requests 200] [--max-tokens 32]
      CLIENTS streaming chat requests at a time, REQUESTS in all (greedy, logprobs on, so every token
      arrives in a chunk of its own): requests/s, generated tok/s, and time to first token p50/p99.
  serve_load.py PORT --stall [--prompt-tokens 1536]
      One stream runs; then a request with a long prompt (random letters: no held session matches it)
      arrives. Prints the new request's time to first token, how many tokens the running stream got
      meanwhile, and its longest gap between two tokens — what --prefill-chunk bounds.
  serve_load.py --make-fixture-model DIR
      The model folder tests/server serves (tests/fixtures/qwen3_binary and a byte tokenizer, as
      tests/runtime/byte_tokenizer_model.h builds it; the chat template "role<content>").

Numbers from a 2-core machine shared with builds vary by tens of percent between runs: compare
servers by alternating runs, not against numbers taken at another time.
"""
import argparse
import http.client
import json
import pathlib
import random
import shutil
import threading
import time


def make_fixture_model(folder: pathlib.Path) -> None:
    source = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "qwen3_binary"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copy(source / name, folder / name)
    # GPT-2's byte-to-character table, no merges: token b is byte b.
    vocab, unprintable = {}, 256
    for b in range(256):
        printable = 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
        vocab[chr(b if printable else unprintable)] = b
        unprintable += 0 if printable else 1
    tokenizer = {"model": {"type": "BPE", "vocab": vocab, "merges": []},
                 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                                   "use_regex": True},
                 "decoder": {"type": "ByteLevel"}, "added_tokens": []}
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    template = ("{%- for m in messages %}{{ m.role }}<{{ m.content }}>{% endfor %}"
                "{%- if add_generation_prompt %}assistant<{% endif %}")
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))


def stream(port: int, content: str, max_tokens: int, on_token=None):
    """Streams one chat request; returns (time sent, [arrival time of each token's chunk])."""
    body = json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                       "temperature": 0, "logprobs": True, "stream": True})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    sent = time.perf_counter()
    connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:200]!r}")
    times = []
    while True:
        line = response.fp.readline()
        if not line or line.startswith(b"data: [DONE]"):
            break
        if line.startswith(b"data: ") and b'"logprobs":{' in line:
            times.append(time.perf_counter())
            if on_token:
                on_token(len(times))
    connection.close()
    return sent, times


def load(port: int, clients: int, requests: int, max_tokens: int) -> None:
    lock = threading.Lock()
    ttft, tokens, errors, next_request = [], [0], [0], [0]

    def worker():
        while True:
            with lock:
                i = next_request[0]
                next_request[0] += 1
            if i >= requests:
                return
            try:
                sent, times = stream(port, f"conversation {i % 37}, tell me something", max_tokens)
            except Exception:  # counted, not raised: the run goes on
                with lock:
                    errors[0] += 1
                continue
            with lock:
                if times:
                    ttft.append(1e3 * (times[0] - sent))
                tokens[0] += len(times)

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    ttft.sort()
    pick = lambda q: ttft[min(len(ttft) - 1, int(q * len(ttft)))] if ttft else float("nan")
    print(f"{clients} clients, {requests} requests of {max_tokens} tokens: {requests / seconds:.1f} requests/s, "
          f"{tokens[0] / seconds:.0f} tok/s, TTFT p50 {pick(0.5):.1f} ms p99 {pick(0.99):.1f} ms, "
          f"errors {errors[0]}, {seconds:.1f} s")


def stall(port: int, prompt_tokens: int) -> None:
    started = threading.Event()
    running = {}

    def run():
        running["sent"], running["times"] = stream(port, "the running stream", 1200,
                                                   lambda n: n == 5 and started.set())
    thread = threading.Thread(target=run)
    thread.start()
    started.wait()
    prompt = "".join(random.choice("abcdefghij") for _ in range(prompt_tokens))
    sent, times = stream(port, prompt, 2)
    thread.join()
    first = times[0]
    a = running["times"]
    during = sum(1 for t in a if sent < t < first)
    gaps = [y - x for x, y in zip(a, a[1:]) if y > sent and x < first]
    print(f"new request of {prompt_tokens} characters: TTFT {1e3 * (first - sent):.0f} ms; the running stream "
          f"got {during} tokens meanwhile, longest gap {1e3 * max(gaps, default=0):.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("port", type=int, nargs="?")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--stall", action="store_true")
    parser.add_argument("--prompt-tokens", type=int, default=1536)
    parser.add_argument("--make-fixture-model", type=pathlib.Path)
    args = parser.parse_args()
    if args.make_fixture_model:
        make_fixture_model(args.make_fixture_model)
    elif args.port is None:
        parser.error("a PORT (or --make-fixture-model DIR) is needed")
    elif args.stall:
        stall(args.port, args.prompt_tokens)
    else:
        load(args.port, args.clients, args.requests, args.max_tokens)


if __name__ == "__main__":
    main()
