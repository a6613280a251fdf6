"""Training at variable sequence lengths: eager, thunder.jit and torch.compile side by side in one
process (issue 29).

    python -m benchmarks.bench_varlen_train [--device cpu|cuda] [--model llama|gpt2|bert]
        [--lengths 96,160,128,224,192] [--epochs 3] [--batch 8] [--layers 2] [--hidden 256]

Each epoch runs one training step (forward, loss, backward, SGD step) per length, in the order
given. Contenders:
  thunder        - thunder.jit(model) with the sequence dimension marked dynamic
                   (torch._dynamo.mark_dynamic): one trace for every length
                   (docs/symbolic_sizes.md);
  thunder-static - thunder.jit(model) without marks: a trace per length;
  compile        - torch.compile(model, dynamic=True);
  compile-auto   - torch.compile(model): static at the first length, then dynamic (PyTorch's
                   automatic dynamic shapes).
Reported per contender: the first epoch's seconds (it compiles), the last epoch's ms per step,
the number of compiles (thunder: traces; torch.compile: graphs), and the largest difference of a
step's loss from eager's over all steps.
"""

import argparse
import copy
import time

import torch


def _model(args):
    import transformers as T

    torch.manual_seed(0)
    h, n = args.hidden, args.layers
    heads = max(1, h // 64)
    if args.model == "llama":
        cfg = T.LlamaConfig(vocab_size=args.vocab, hidden_size=h, intermediate_size=h * 3, num_hidden_layers=n,
                            num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                            max_position_embeddings=4096)
        model = T.LlamaForCausalLM(cfg)
    elif args.model == "gpt2":
        cfg = T.GPT2Config(vocab_size=args.vocab, n_embd=h, n_layer=n, n_head=heads, n_positions=4096,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = T.GPT2LMHeadModel(cfg)
    elif args.model == "bert":
        cfg = T.BertConfig(vocab_size=args.vocab, hidden_size=h, num_hidden_layers=n, num_attention_heads=heads,
                           intermediate_size=h * 4, max_position_embeddings=4096, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0)
        model = T.BertForMaskedLM(cfg)
    else:
        raise ValueError(args.model)
    return model.train().to(args.device, getattr(torch, args.dtype))


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--model", default="llama")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lengths", default="96,160,128,224,192")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--only", default="eager,thunder,thunder-static,compile,compile-auto")
    args = p.parse_args()
    import thunder

    lengths = [int(x) for x in args.lengths.split(",")]
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, args.vocab, (args.batch, n), generator=g).to(args.device) for n in lengths]
    base = _model(args)
    rows, eager_losses = [], None
    for name in args.only.split(","):
        model = copy.deepcopy(base)
        run = model
        if name == "thunder" or name == "thunder-static":
            run = thunder.jit(model)
        elif name == "compile":
            torch._dynamo.reset()
            run = torch.compile(model, dynamic=True)
        elif name == "compile-auto":
            torch._dynamo.reset()
            run = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        losses, epoch_s = [], []
        for _ in range(args.epochs):
            _sync(args.device)
            t = time.perf_counter()
            for ids in batches:
                if name == "thunder":
                    ids = ids.clone()
                    torch._dynamo.mark_dynamic(ids, 1)
                loss = run(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                losses.append(loss.detach())
            _sync(args.device)
            epoch_s.append(time.perf_counter() - t)
        losses = torch.stack(losses).float().cpu()
        if name == "eager":
            eager_losses = losses
        diff = float((losses - eager_losses).abs().max()) if eager_losses is not None else float("nan")
        if name.startswith("thunder"):
            compiles = thunder.cache_misses(run)
        elif name.startswith("compile"):
            from torch._dynamo.utils import counters

            compiles = counters["stats"]["unique_graphs"]
            counters.clear()
        else:
            compiles = 0
        rows.append((name, epoch_s[0], epoch_s[-1] / len(batches) * 1e3, compiles, diff))
        del model, run, opt
    print(f"device {args.device}, torch {torch.__version__}, {args.model} {args.layers} layers hidden {args.hidden} "
          f"{args.dtype}, batch {args.batch}, lengths {lengths}, {args.epochs} epochs")
    print("| contender | first epoch s | last epoch ms/step | compiles | max loss diff vs eager |")
    print("|---|---|---|---|---|")
    for name, first, step, compiles, diff in rows:
        print(f"| {name} | {first:.2f} | {step:.1f} | {compiles} | {diff:.2e} |")


if __name__ == "__main__":
    main()
