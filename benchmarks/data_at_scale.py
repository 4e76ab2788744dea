#!/usr/bin/env python3
"""Data at scale: kpipe-prepare on texts of gigabytes, and kpipe-train's memory and start-up on a small and a
large token file (docs/performance.md, "Data at scale").

    benchmarks/data_at_scale.py [--build-dir build] [--work-dir /tmp/kpipe-data-bench] [--sizes 1G,4G]
                                [--bpe-sizes 1G] [--train-sizes 10M,1G,4G] [--steps 300] [--base-train BIN]
                                [--base-max-size 1G] [--out DIR] [--keep]

Every input is generated under --work-dir, never in the repository: English-like lines of pseudo-random words
(a fixed seed; 16 distinct blocks of 8 MiB, cycled), cut to the exact size.
  prepare   kpipe-prepare TEXT -o OUT.h5 (bytes) for each --sizes, and --tokenizer bpe --vocab-size 8192
            (default --sample-bytes) for each --bpe-sizes: wall seconds, MB/s of text (1 MB = 10^6 bytes),
            peak resident set (getrusage of the child), the token file's size
  train     token files of each --train-sizes bytes of text (prepared from a prefix of the generated text),
            kpipe-train --preset tiny on 2 ranks (pipeline_size 2) for --steps steps: each rank's peak
            resident set (a wrapper process per rank reports getrusage of its child) and the time to the
            first step (from starting mpiexec to the first step's line on stderr); with --base-train, the
            same for that kpipe-train binary (one from before the data streamed) for comparison, on the
            token files up to --base-max-size
Writes data.md and data.json into --out (default <build-dir>/data-results).
"""
import argparse
import itertools
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BLOCK_BYTES = 8 << 20
BLOCKS = 16

# Runs the command, then prints its peak resident set (KiB) and the MPI rank on stderr.
RSS_WRAPPER = (
    "import os, resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "rank = os.environ.get('OMPI_COMM_WORLD_RANK', os.environ.get('PMI_RANK', '0'))\n"
    "print(f'peak_rss_kib rank={rank} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}', file=sys.stderr)\n"
    "sys.exit(code)\n")


def parse_size(text):
    units = {"K": 10**3, "M": 10**6, "G": 10**9}
    text = text.strip().upper()
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def words(rng):
    """A vocabulary of 5000 made-up words from syllables, most frequent first (Zipf weights)."""
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    vocabulary = sorted({"".join(rng.choice(syllables) for _ in range(rng.choice((1, 1, 2, 2, 3, 4))))
                         for _ in range(8000)})[:5000]
    rng.shuffle(vocabulary)
    return vocabulary, [1.0 / (k + 1) for k in range(len(vocabulary))]


def text_block(seed, vocabulary, weights):
    """BLOCK_BYTES of lines of 4 to 18 words, capitalized, ending in a punctuation mark."""
    rng = random.Random(seed)
    cumulative = list(itertools.accumulate(weights))
    chosen = rng.choices(vocabulary, cum_weights=cumulative, k=BLOCK_BYTES // 3)
    lines, size, at = [], 0, 0
    while size < BLOCK_BYTES:
        n = rng.randint(4, 18)
        line = " ".join(chosen[at:at + n]).capitalize() + rng.choice(".,;?!") + "\n"
        at += n
        lines.append(line)
        size += len(line)
    return "".join(lines).encode()[:BLOCK_BYTES]


def generate_text(path, size):
    """`size` bytes of text at `path` (kept when already there with that size)."""
    if path.exists() and path.stat().st_size == size:
        return
    rng = random.Random(20)
    vocabulary, weights = words(rng)
    blocks = [text_block(seed, vocabulary, weights) for seed in range(BLOCKS)]
    written = 0
    with open(path, "wb") as out:
        k = 0
        while written < size:
            piece = blocks[k % BLOCKS][: size - written]
            out.write(piece)
            written += len(piece)
            k += 1


def run_measured(command, env=None):
    """Runs a command alone in a wrapper: (wall seconds, peak RSS KiB, stdout, stderr)."""
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", RSS_WRAPPER] + command, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(command)}\n{done.stderr[-2000:]}")
    rss = [int(m.group(1)) for m in re.finditer(r"peak_rss_kib rank=\d+ (\d+)", done.stderr)]
    return seconds, rss[0], done.stdout, done.stderr


def prepare(build, text, output, tokenizer):
    command = [str(build / "apps" / "kpipe-prepare"), str(text), "-o", str(output), "--quiet"]
    if tokenizer == "bpe":
        command += ["--tokenizer", "bpe", "--vocab-size", "8192"]
    seconds, rss, stdout, _ = run_measured(command)
    size = text.stat().st_size
    trained = re.search(r"trained on (\d+) bytes.* in ([0-9.]+) s", stdout)
    return {"text_bytes": size, "tokenizer": tokenizer, "seconds": seconds, "mb_per_s": size / seconds / 1e6,
            "peak_rss_mib": rss / 1024.0, "token_file_bytes": output.stat().st_size,
            "bpe_sample_bytes": int(trained.group(1)) if trained else None,
            "bpe_training_seconds": float(trained.group(2)) if trained else None}


def train(train_binary, mpiexec, data, steps, env):
    """kpipe-train --preset tiny on 2 ranks: per-rank peak RSS (MiB) and seconds to the first step."""
    command = mpiexec + ["-n", "2", sys.executable, "-c", RSS_WRAPPER, str(train_binary), "--preset", "tiny",
                         "--data", str(data), "--steps", str(steps), "--pipeline.pipeline_size", "2",
                         "--train.eval_every", "0"]
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    first_step, lines = None, []
    for line in process.stderr:
        lines.append(line)
        if first_step is None and re.match(r"step\s+1/", line):
            first_step = time.monotonic() - start
    if process.wait() != 0:
        sys.exit(f"failed: {' '.join(command)}\n{''.join(lines)[-2000:]}")
    rss = {int(m.group(1)): int(m.group(2)) / 1024.0
           for m in (re.match(r"peak_rss_kib rank=(\d+) (\d+)", line) for line in lines) if m}
    return {"peak_rss_mib": [rss[r] for r in sorted(rss)], "first_step_seconds": first_step,
            "seconds": time.monotonic() - start}


def markdown(results):
    rows = ["| text | tokenizer | wall (s) | MB/s | peak RSS (MiB) | token file (MB) | BPE sample (MB), training (s) |",
            "|---|---|---|---|---|---|---|"]
    for r in results["prepare"]:
        sample = (f"{r['bpe_sample_bytes'] / 1e6:.0f}, {r['bpe_training_seconds']:.1f}"
                  if r["bpe_sample_bytes"] else "")
        rows.append(f"| {r['text_bytes'] / 1e9:.2f} GB | {r['tokenizer']} | {r['seconds']:.1f} | {r['mb_per_s']:.1f} | "
                    f"{r['peak_rss_mib']:.0f} | {r['token_file_bytes'] / 1e6:.0f} | {sample} |")
    rows += ["", "| token file (text) | kpipe-train | peak RSS rank 0 / rank 1 (MiB) | first step (s) |", "|---|---|---|---|"]
    for r in results["train"]:
        rows.append(f"| {r['text_bytes'] / 1e6:.0f} MB | {r['binary']} | "
                    f"{' / '.join(f'{m:.1f}' for m in r['peak_rss_mib'])} | {r['first_step_seconds']:.2f} |")
    return "\n".join(rows) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=str(ROOT / "build"))
    parser.add_argument("--work-dir", default="/tmp/kpipe-data-bench")
    parser.add_argument("--sizes", default="1G,4G", help="texts kpipe-prepare encodes as bytes")
    parser.add_argument("--bpe-sizes", default="1G", help="texts kpipe-prepare encodes with BPE ('' for none)")
    parser.add_argument("--train-sizes", default="10M,1G,4G", help="token files kpipe-train trains on")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--base-train", help="another kpipe-train to measure beside this one")
    parser.add_argument("--base-max-size", default="1G",
                        help="the largest token file for --base-train (one that reads the whole file needs 4 bytes "
                             "per token on every rank)")
    parser.add_argument("--mpiexec", default="mpiexec --oversubscribe" + (" --allow-run-as-root" if os.geteuid() == 0 else ""))
    parser.add_argument("--out")
    parser.add_argument("--keep", action="store_true", help="keep the generated files in --work-dir")
    args = parser.parse_args()
    build = Path(args.build_dir).resolve()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else build / "data-results"
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    results = {"prepare": [], "train": []}
    sizes = sorted({parse_size(s) for s in args.sizes.split(",") + args.bpe_sizes.split(",") + args.train_sizes.split(",") if s})
    largest = work / f"text-{max(sizes)}.txt"
    print(f"generating {max(sizes) / 1e9:.2f} GB of text in {largest}", flush=True)
    generate_text(largest, max(sizes))
    texts = {}
    for size in sizes:  # prefixes of the largest
        texts[size] = largest if size == max(sizes) else work / f"text-{size}.txt"
        if size != max(sizes) and not (texts[size].exists() and texts[size].stat().st_size == size):
            with open(largest, "rb") as src, open(texts[size], "wb") as dst:
                remaining = size
                while remaining:
                    piece = src.read(min(remaining, 64 << 20))
                    dst.write(piece)
                    remaining -= len(piece)
    token_files = {}
    for tokenizer, chosen in (("bytes", args.sizes), ("bpe", args.bpe_sizes)):
        for size in [parse_size(s) for s in chosen.split(",") if s]:
            output = work / f"tokens-{tokenizer}-{size}.h5"
            r = prepare(build, texts[size], output, tokenizer)
            print(f"prepare {size / 1e9:.2f} GB {tokenizer}: {r['seconds']:.1f} s, {r['mb_per_s']:.1f} MB/s, "
                  f"peak RSS {r['peak_rss_mib']:.0f} MiB", flush=True)
            results["prepare"].append(r)
            if tokenizer == "bytes":
                token_files[size] = output
    binaries = [("this", build / "apps" / "kpipe-train")] + ([("base", Path(args.base_train))] if args.base_train else [])
    for size in [parse_size(s) for s in args.train_sizes.split(",") if s]:
        if size not in token_files:
            token_files[size] = work / f"tokens-bytes-{size}.h5"
            prepare(build, texts[size], token_files[size], "bytes")
        for name, binary in binaries:
            if name == "base" and size > parse_size(args.base_max_size):
                continue
            r = train(binary, args.mpiexec.split(), token_files[size], args.steps, env)
            r.update(text_bytes=size, binary=name)
            print(f"train {size / 1e6:.0f} MB ({name}): peak RSS {r['peak_rss_mib']} MiB, first step "
                  f"{r['first_step_seconds']:.2f} s", flush=True)
            results["train"].append(r)
    (out / "data.json").write_text(json.dumps(results, indent=1))
    (out / "data.md").write_text(markdown(results))
    print(markdown(results))
    if not args.keep:
        for path in work.iterdir():
            path.unlink()
        work.rmdir()


if __name__ == "__main__":
    main()
