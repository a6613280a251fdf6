"""Greedy decoding with transformers' default (dynamic) KV cache: eager, thunder.jit and
torch.compile(dynamic=True) on the forward, side by side in one process (issue 29).

    python -m benchmarks.bench_decode [--device cpu|cuda] [--layers 4] [--hidden 256] [--tokens 32]

A decoding step reads a cache one token longer than the step before, so every step has new
shapes. Per contender, three generations of `--tokens` tokens each:
  cold  - the first (compiles the prefill and the lengths it meets),
  new   - a longer prompt: every step meets a length not seen before,
  seen  - that prompt again: every length seen once.
Reported: ms per generated token for each, the compiles (thunder: traces, i.e. cache misses;
torch.compile: dynamo frames compiled) and whether the tokens equal eager's. `thunder` is
thunder.jit(forward, cache="symbolic values") (the cache's length becomes a size symbol once it
changed), `thunder-static` the default cache, which traces each new length.
"""

import argparse
import time

import torch


def _model(args):
    import transformers as T

    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 2,
                        num_hidden_layers=args.layers, num_attention_heads=max(1, args.hidden // 64),
                        num_key_value_heads=max(1, args.hidden // 128), max_position_embeddings=4096)
    return T.LlamaForCausalLM(cfg).eval().to(args.device, getattr(torch, args.dtype))


def _generate(model, ids, n):
    if ids.is_cuda:
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
    if ids.is_cuda:
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t) / n * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=1024)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--only", default="eager,thunder,thunder-static,compile")
    args = p.parse_args()
    import thunder

    g = torch.Generator().manual_seed(1)
    short = torch.randint(0, args.vocab, (1, 8), generator=g).to(args.device)
    long = torch.randint(0, args.vocab, (1, 8 + args.tokens + 3), generator=g).to(args.device)
    rows, expected = [], {}
    for name in args.only.split(","):
        model = _model(args)
        forward = model.forward
        if name == "thunder":
            # Symbolic sizes (docs/symbolic_sizes.md): the cache's length a size symbol once it changed.
            model.forward = thunder.jit(forward, cache="symbolic values")
        elif name == "thunder-static":
            model.forward = thunder.jit(forward)  # a trace per new length
        elif name == "compile":
            torch._dynamo.reset()
            model.forward = torch.compile(forward, dynamic=True)
        results = []
        with torch.no_grad():
            for ids in (short, long, long):
                out, ms = _generate(model, ids, args.tokens)
                results.append((out, ms))
        if name.startswith("thunder"):
            compiles = thunder.cache_misses(model.forward)
        elif name == "compile":
            from torch._dynamo.utils import counters

            compiles = counters["stats"]["unique_graphs"]
        else:
            compiles = 0
        if name == "eager":
            expected = {k: r[0] for k, r in enumerate(results)}
        same = all(torch.equal(r[0], expected[k]) for k, r in enumerate(results)) if expected else None
        rows.append((name, *(r[1] for r in results), compiles, same))
        del model
    print(f"device {args.device}, torch {torch.__version__}, Llama {args.layers} layers hidden {args.hidden} "
          f"{args.dtype}, {args.tokens} tokens per generation")
    print("| contender | cold ms/token | new lengths ms/token | seen lengths ms/token | compiles | tokens equal eager |")
    print("|---|---|---|---|---|---|")
    for name, cold, new, seen, compiles, same in rows:
        print(f"| {name} | {cold:.2f} | {new:.2f} | {seen:.2f} | {compiles} | {same} |")


if __name__ == "__main__":
    main()
