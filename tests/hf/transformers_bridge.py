#!/usr/bin/env python3
"""kpipe and Hugging Face transformers on the same models, both ways (the ctest tests kpipe_hf_export and
kpipe_hf_import; .ci/jobs/35-transformers.sh installs the pinned transformers they need).

  export  kpipe trains a bytes model and a BPE model (or takes the quick start's checkpoint, --quickstart) and
          kpipe-export writes them: transformers' loss on 20 windows equals kpipe-eval's within 1e-5 relative,
          greedy generation gives kpipe-generate's tokens, and AutoTokenizer gives kpipe's ids on real text.
  import  transformers creates GPT-2 models (small, and GPT-2-124M's shapes with vocabulary 50257) with a
          byte-level BPE tokenizer it trains, and saves them (one file, and sharded); kpipe-import reads them:
          kpipe-eval's loss equals transformers', one training step on 2 pipeline ranks (--init-from) has the
          loss of transformers' forward on that batch, and kpipe's tokenizer gives AutoTokenizer's ids.

Exit 77 (skipped, one line) where transformers is not installed.
Usage: transformers_bridge.py export|import --build BUILD_DIR --source SOURCE_DIR [--quickstart CKPT]
       [--mpiexec MPIEXEC FLAGS...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import transformers
    from tokenizers import ByteLevelBPETokenizer
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
except ImportError as error:
    print(f"SKIPPED: no transformers for {sys.executable} ({error}): .ci/jobs/35-transformers.sh installs it")
    sys.exit(77)

# Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11, which generate() asks about; no
# model here is sharded, so the answer is no.
import transformers.generation.utils as generation_utils  # noqa: E402

generation_utils.is_fsdp_managed_module = lambda module: False

TOLERANCE = 1e-5  # relative, on the mean loss
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, args))} exited {result.returncode}:\n"
                 f"{result.stderr.decode(errors='replace')[-3000:]}")
    return result.stdout


class Kpipe:
    def __init__(self, build, mpiexec):
        self.apps = os.path.join(build, "apps")
        self.encode = os.path.join(build, "tests", "kpipe_test_encode_text")
        self.mpiexec = mpiexec

    def app(self, name, *args, ranks=1):
        command = [os.path.join(self.apps, name), *map(str, args)]
        return run(self.mpiexec + ["-n", str(ranks)] + command if ranks > 1 else command)

    def ids(self, checkpoint, path):
        return [int(x) for x in run([self.encode, checkpoint, path]).split()]

    def eval_loss(self, checkpoint, path, windows):
        return float(self.app("kpipe-eval", checkpoint, "--data", path, "--max-windows", windows))


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:  # newline='': "\r\n" stays as kpipe reads it
        return f.read()


def hf_loss(model, ids, seq_len, windows):
    """Mean per-token loss over consecutive windows of seq_len + 1 tokens, as kpipe-eval takes them."""
    x = torch.tensor(ids[: windows * (seq_len + 1)]).view(windows, seq_len + 1)
    total = 0.0
    with torch.no_grad():
        for row in x:  # one window at a time: bounded memory for a 50257-token vocabulary
            logits = model(row[None, :-1]).logits.double()
            total += -torch.log_softmax(logits, -1)[0].gather(1, row[1:, None]).mean().item()
    return total / windows


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


# Text that a tokenizer must get exactly right: non-ASCII letters, numbers of other scripts, emoji, white-space runs
# of every kind (tabs, CR LF, NBSP, NEL, EM SPACE, U+001C-U+001F), contractions, digits, the end-of-text marker.
TRICKY = ("Hello world!  Two  spaces\tand\ttabs\n\n  indented\r\nI'm don't they're we've I'll he'd it's 'S x'll'm\n"
          "ünïcödé Ελληνικά русский 日本語のテキスト 한국어 עברית العربية 🙂👍🏽 ½ ² Ⅳ ١٢٣ ९ end.\n"
          "\x1c\x1d\x1e\x1f nbsp:\u00a0x em:\u2003x nel:\u0085x ideographic:\u3000x <|endoftext|>after<|endoftext|>\n"
          "    four\n        eight\n\t\ttabs  \n123 4567 3.14159 a1b2c3 ----- ..... ````` aaaaaa ababab\n   \n  ")


def compare_ids(name, tokenizer, kpipe, checkpoint, path):
    hf_ids = tokenizer(read_text(path))["input_ids"]
    ids = kpipe.ids(checkpoint, path)
    first = next((i for i, (a, b) in enumerate(zip(hf_ids, ids)) if a != b), min(len(hf_ids), len(ids)))
    check(hf_ids == ids, f"{name}: AutoTokenizer gives kpipe's {len(ids)} ids"
          + ("" if hf_ids == ids else f" (first difference at {first}: "
             f"{tokenizer.convert_ids_to_tokens(hf_ids[first:first + 3])} vs "
             f"{tokenizer.convert_ids_to_tokens(ids[first:first + 3])})"))


def greedy(model, ids, seq_len, tokens):
    """Greedy decoding as kpipe-generate does it: each token from a forward of the last seq_len tokens."""
    ids = list(ids)
    with torch.no_grad():
        for _ in range(tokens):
            window = torch.tensor(ids[-seq_len:])[None]
            ids.append(int(model(window).logits[0, -1].argmax()))
    return ids


def check_export(kpipe, name, checkpoint, work, text_path, prompt):
    out = os.path.join(work, f"{name}-hf")
    kpipe.app("kpipe-export", checkpoint, "-o", out)
    model = GPT2LMHeadModel.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    seq_len = model.config.n_positions
    # The loss on 20 windows of kpipe's ids.
    ids = kpipe.ids(checkpoint, text_path)
    windows = min(20, len(ids) // (seq_len + 1))
    mine, theirs = kpipe.eval_loss(checkpoint, text_path, windows), hf_loss(model, ids, seq_len, windows)
    check(windows == 20 and relative(theirs, mine) < TOLERANCE,
          f"{name}: loss on {windows} windows: kpipe-eval {mine:.9g}, transformers {theirs:.9g} "
          f"(relative difference {relative(theirs, mine):.1e})")
    # The tokenizer, on the text and on the tricky one.
    compare_ids(name, tokenizer, kpipe, checkpoint, text_path)
    compare_ids(name + " (tricky text)", tokenizer, kpipe, checkpoint, os.path.join(work, "tricky.txt"))
    decoded = tokenizer.decode(kpipe.ids(checkpoint, os.path.join(work, "tricky.txt")))
    check(decoded == TRICKY, f"{name}: transformers decodes kpipe's ids back to the text")
    # Greedy generation of 100 tokens.
    prompt_ids = tokenizer(prompt)["input_ids"]
    hf_ids = greedy(model, prompt_ids, seq_len, 100)
    if len(prompt_ids) + 100 <= seq_len:  # within the window transformers' own generate() does the same
        generated = model.generate(torch.tensor([prompt_ids]), max_new_tokens=100, do_sample=False,
                                   pad_token_id=0, eos_token_id=None)[0].tolist()
        check(generated == hf_ids, f"{name}: transformers' generate() agrees with the greedy loop")
    text = kpipe.app("kpipe-generate", checkpoint, "--prompt", prompt, "--tokens", 100, "--temperature", 0)[:-1]
    theirs = bytes(hf_ids) if name == "bytes" else tokenizer.decode(hf_ids).encode()
    check(text == theirs, f"{name}: greedy generation of 100 tokens: kpipe-generate and transformers give "
          f"the same text ({text[:60]!r}...)")
    return model


def write_texts(o, work):
    """The real text (kpipe's docs) and the tricky one, as files; the real one's path."""
    text = os.path.join(work, "docs.txt")
    with open(text, "wb") as f:
        for name in sorted(os.listdir(os.path.join(o.source, "docs"))):
            if name.endswith(".md"):
                with open(os.path.join(o.source, "docs", name), "rb") as doc:
                    f.write(doc.read())
    with open(os.path.join(work, "tricky.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(TRICKY)
    return text


def export_checks(o, kpipe, work):
    text = write_texts(o, work)
    # Bytes: the quick start's checkpoint, or one like it trained here (seq_len 128: 100 tokens fit a window).
    bytes_checkpoint = o.quickstart
    if not bytes_checkpoint:
        kpipe.app("kpipe-train", "--model.n_layers", 2, "--model.seq_len", 128, "--steps", 150, "--lr", 3e-3,
                  "--checkpoint-dir", os.path.join(work, "bytes"), "--checkpoint-every", 150)
        bytes_checkpoint = os.path.join(work, "bytes")
    check_export(kpipe, "bytes", bytes_checkpoint, work, text, "The cat ")
    # BPE: kpipe-prepare's SentencePiece model, trained on the docs, 2 pipeline stages.
    kpipe.app("kpipe-prepare", text, "--tokenizer", "bpe", "--vocab-size", 1024, "-o", os.path.join(work, "bpe.h5"))
    kpipe.app("kpipe-train", "--model.n_layers", 2, "--model.seq_len", 128, "--steps", 60, "--lr", 3e-3,
              "--data", os.path.join(work, "bpe.h5"), "--pipeline-size", 2, "--microbatches", 2,
              "--checkpoint-dir", os.path.join(work, "bpe"), "--checkpoint-every", 60, ranks=2)
    check_export(kpipe, "bpe", os.path.join(work, "bpe"), work, text, "The pipeline ")
    # bf16: the weights rounded once; transformers computes in bf16, so only a loose agreement is expected.
    out = os.path.join(work, "bf16-hf")
    kpipe.app("kpipe-export", os.path.join(work, "bpe"), "-o", out, "--dtype", "bf16")
    model = GPT2LMHeadModel.from_pretrained(out, torch_dtype=torch.float32).eval()
    ids = kpipe.ids(os.path.join(work, "bpe"), text)
    mine = kpipe.eval_loss(os.path.join(work, "bpe"), text, 4)
    theirs = hf_loss(model, ids, model.config.n_positions, 4)
    check(json.load(open(os.path.join(out, "config.json")))["torch_dtype"] == "bfloat16" and relative(theirs, mine) < 1e-2,
          f"bf16 export: loss {theirs:.6g} within 1% of fp32's {mine:.6g}")


def save_gpt2(path, tokenizer, shard=None, **shape):
    torch.manual_seed(7)
    model = GPT2LMHeadModel(GPT2Config(**shape)).eval()
    model.save_pretrained(path, max_shard_size=shard) if shard else model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model


def import_checks(o, kpipe, work):
    text_path = write_texts(o, work)
    # A byte-level BPE as GPT-2's, trained here by the tokenizers library (no hub download).
    bpe = ByteLevelBPETokenizer()
    bpe.train([text_path], vocab_size=3000, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(work)
    tokenizer = GPT2TokenizerFast(vocab_file=os.path.join(work, "vocab.json"),
                                  merges_file=os.path.join(work, "merges.txt"))
    text = read_text(text_path)
    ids = tokenizer(text)["input_ids"]

    # Small, saved sharded: loss, tokenizer, and one training step on 2 pipeline stages.
    small = os.path.join(work, "small")
    model = save_gpt2(small, tokenizer, shard="200KB", n_embd=64, n_layer=3, n_head=4, n_positions=64,
                      vocab_size=len(tokenizer))
    check(os.path.exists(os.path.join(small, "model.safetensors.index.json")), "small: saved sharded")
    checkpoint = os.path.join(work, "small.h5")
    said = kpipe.app("kpipe-import", small, "-o", checkpoint).decode()
    check("copy of the token embedding" in said, "small: the tied head is said to be copied")
    mine, theirs = kpipe.eval_loss(checkpoint, text_path, 20), hf_loss(model, ids, 64, 20)
    check(relative(theirs, mine) < TOLERANCE, f"small: loss on 20 windows: kpipe-eval {mine:.9g}, transformers "
          f"{theirs:.9g} (relative difference {relative(theirs, mine):.1e})")
    compare_ids("small: GPT-2 byte-level BPE", tokenizer, kpipe, checkpoint, text_path)
    compare_ids("small: GPT-2 byte-level BPE (tricky text)", tokenizer, kpipe, checkpoint,
                os.path.join(work, "tricky.txt"))
    # A text of exactly 2 (seq_len + 1) tokens, half held out: every training window is its first seq_len + 1.
    cut = next(c for c in range(1, len(text)) if len(tokenizer(text[:c])["input_ids"]) == 130)
    step_text = os.path.join(work, "step.txt")
    with open(step_text, "w", encoding="utf-8", newline="") as f:
        f.write(text[:cut])
    window = torch.tensor(tokenizer(text[:cut])["input_ids"][:65])
    with torch.no_grad():
        logits = model(window[None, :-1]).logits.double()
        theirs = -torch.log_softmax(logits, -1)[0].gather(1, window[1:, None]).mean().item()
    metrics = os.path.join(work, "step.jsonl")
    kpipe.app("kpipe-train", "--init-from", checkpoint, "--data", step_text, "--data.val_fraction", 0.5,
              "--steps", 1, "--batch", 4, "--microbatches", 2, "--pipeline-size", 2, "--metrics", metrics, ranks=2)
    first = json.loads(open(metrics).readline())
    check(first["step"] == 1 and relative(theirs, first["loss"]) < TOLERANCE,
          f"small: one training step on 2 pipeline ranks from the import: loss {first['loss']:.9g}, transformers' "
          f"forward {theirs:.9g}")

    # GPT-2-124M's shapes (12 layers, d_model 768, 12 heads, 1024 positions, vocabulary 50257), random weights;
    # kpipe keeps 64 positions (--seq-len) so that its forward takes seconds on a CPU.
    big = os.path.join(work, "gpt2-124m")
    start = time.time()
    model = save_gpt2(big, tokenizer, n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=50257)
    saved = time.time() - start
    checkpoint = os.path.join(work, "gpt2-124m.h5")
    start = time.time()
    kpipe.app("kpipe-import", big, "-o", checkpoint, "--seq-len", 64)
    imported = time.time() - start
    mine, theirs = kpipe.eval_loss(checkpoint, text_path, 2), hf_loss(model, ids, 64, 2)
    check(relative(theirs, mine) < TOLERANCE, f"GPT-2-124M shapes: loss on 2 windows: kpipe-eval {mine:.9g}, "
          f"transformers {theirs:.9g} (relative difference {relative(theirs, mine):.1e}); saved in {saved:.1f} s, "
          f"imported in {imported:.1f} s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("direction", choices=["export", "import"])
    parser.add_argument("--build", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--quickstart", default=os.environ.get("KPIPE_HF_QUICKSTART", ""),
                        help="the bytes checkpoint to export (default: $KPIPE_HF_QUICKSTART, else one trained here)")
    parser.add_argument("--mpiexec", nargs=argparse.REMAINDER, default=["mpiexec"], help="mpiexec and its flags (last)")
    o = parser.parse_args()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    torch.set_num_threads(1)
    os.environ.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    kpipe = Kpipe(o.build, o.mpiexec)
    with tempfile.TemporaryDirectory() as work:
        (export_checks if o.direction == "export" else import_checks)(o, kpipe, work)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
