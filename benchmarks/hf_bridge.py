#!/usr/bin/env python3
"""Figures of docs/user-guide.md's "Models in and out": kpipe-import and kpipe-export on a GPT-2-124M-shaped model
(12 layers, d_model 768, 12 heads, 1024 positions, vocabulary 50257; random weights that transformers creates and
saves), their time and peak memory (/usr/bin/time's maximum resident set), beside the files' sizes and the disk's
write speed (dd of 1 GiB with conv=fsync into the same directory).

    <python with transformers> benchmarks/hf_bridge.py [--build-dir build] [--work DIR] [--rounds 3]

Each program runs --rounds times; the table gives the median time and the largest resident set. The work
directory (default: a temporary one under build-dir) needs about 3 GB.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time


def timed(args):
    """Seconds and maximum resident set (MiB) of one run of args."""
    start = time.time()
    result = subprocess.run(["/usr/bin/time", "-v", *args], capture_output=True, text=True)
    seconds = time.time() - start
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} exited {result.returncode}: {result.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr).group(1))
    return seconds, rss / 1024


def disk_write_speed(directory):
    """MB/s of dd writing 1 GiB of zeros with an fsync at the end."""
    target = os.path.join(directory, "dd.bin")
    start = time.time()
    subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=1M", "count=1024", "conv=fsync"], check=True,
                   capture_output=True)
    seconds = time.time() - start
    os.remove(target)
    return 1024 * 1024 * 1024 / seconds / 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build-dir", default="build")
    parser.add_argument("--work", default="")
    parser.add_argument("--rounds", type=int, default=3)
    o = parser.parse_args()
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    apps = os.path.join(o.build_dir, "apps")
    work = o.work or tempfile.mkdtemp(prefix="hf-bridge-", dir=o.build_dir)
    os.makedirs(work, exist_ok=True)
    source = os.path.join(work, "gpt2-124m")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257))
    model.save_pretrained(source)
    parameters = sum(p.numel() for p in model.parameters())  # the tied head counted once
    # A tokenizer that kpipe carries (bytes, as kpipe-export writes it): the figures are the weights'.
    subprocess.run([os.path.join(apps, "kpipe-train"), "--steps", "1", "--checkpoint-dir",
                    os.path.join(work, "tiny"), "--checkpoint-every", "1"], check=True, capture_output=True)
    subprocess.run([os.path.join(apps, "kpipe-export"), os.path.join(work, "tiny"), "-o", os.path.join(work, "tiny-hf")],
                   check=True, capture_output=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(work, "tiny-hf", name), source)
    del model

    checkpoint = os.path.join(work, "gpt2-124m.h5")
    runs = {
        "kpipe-import": [os.path.join(apps, "kpipe-import"), source, "-o", checkpoint],
        "kpipe-export (fp32)": [os.path.join(apps, "kpipe-export"), checkpoint, "-o", os.path.join(work, "out32")],
        "kpipe-export --dtype bf16": [os.path.join(apps, "kpipe-export"), checkpoint, "-o", os.path.join(work, "out16"),
                                      "--dtype", "bf16"],
    }
    results = {name: [] for name in runs}
    for _ in range(o.rounds):  # alternated, so that a slow moment of the machine falls on all of them
        for name, args in runs.items():
            results[name].append(timed(args))
    sizes = {
        "kpipe-import": os.path.getsize(checkpoint),
        "kpipe-export (fp32)": os.path.getsize(os.path.join(work, "out32", "model.safetensors")),
        "kpipe-export --dtype bf16": os.path.getsize(os.path.join(work, "out16", "model.safetensors")),
    }
    speed = disk_write_speed(work)
    largest = 50257 * 768 * 4 / 2**20
    print(f"GPT-2-124M shapes: {parameters / 1e6:.1f}M parameters, {(parameters + 50257 * 768) / 1e6:.1f}M in kpipe "
          f"(its head is its own), read from and written to {work}")
    print(f"disk write speed (dd 1 GiB, conv=fsync): {speed:.0f} MB/s; the largest tensor (wte) {largest:.0f} MiB")
    print(f"{'program':<28} {'median s':>9} {'max RSS MiB':>12} {'written MB':>11} {'MB/s':>7}")
    for name, values in results.items():
        seconds = statistics.median(v[0] for v in values)
        rss = max(v[1] for v in values)
        print(f"{name:<28} {seconds:>9.2f} {rss:>12.0f} {sizes[name] / 1e6:>11.0f} {sizes[name] / 1e6 / seconds:>7.0f}")
    if not o.work:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
