#!/usr/bin/env python3
"""PyTorch anchor for the convergence benchmark: kfac_ferminet_alpha's deep autoencoder on
Fashion-MNIST trained with torch.optim.Adam, the same model, loss, initialisation, batch size and
L2 term as apps/autoencoder, for a wall-clock budget. Writes step,seconds,loss like the app, and
like its --eval_every_seconds, the objective on the first --eval_examples images every so many
seconds of training with the clock stopped."""
import argparse
import gzip
import struct
import time

import numpy as np
import torch


def load_images(path):
    with gzip.open(path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            raise SystemExit(f"{path}: not an idx3-ubyte image file")
        data = np.frombuffer(f.read(n * rows * cols), dtype=np.uint8)
    return torch.from_numpy(data.reshape(n, rows * cols).astype(np.float32) / 255.0)


def build(dim):
    widths = [dim, 1000, 500, 250, 30, 250, 500, 1000, dim]
    layers = []
    for i in range(len(widths) - 1):
        lin = torch.nn.Linear(widths[i], widths[i + 1])
        # Glorot uniform weights, zero biases: the app's initialisation.
        torch.nn.init.xavier_uniform_(lin.weight)
        torch.nn.init.zeros_(lin.bias)
        layers.append(lin)
        # tanh everywhere except the 30-wide code layer (i = 3) and the output logits.
        if i != 3 and i != len(widths) - 2:
            layers.append(torch.nn.Tanh())
    return torch.nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--l2_reg", type=float, default=1e-3)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--max_seconds", type=float, default=60)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=12412321)
    p.add_argument("--csv", required=True)
    p.add_argument("--eval_every_seconds", type=float, default=0.0)
    p.add_argument("--eval_examples", type=int, default=10000)
    p.add_argument("--eval_csv", default="")
    args = p.parse_args()
    if args.eval_every_seconds < 0 or (args.eval_every_seconds > 0 and not args.eval_csv):
        raise SystemExit("--eval_every_seconds must be >= 0, and needs --eval_csv")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    x = load_images(args.data_dir + "/train-images-idx3-ubyte.gz")
    model = build(x.shape[1])
    opt = torch.optim.Adam(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.999),
                           eps=1e-8)
    bce = torch.nn.BCEWithLogitsLoss(reduction="none")
    gen = torch.Generator().manual_seed(args.seed)
    rows, evals = [], []
    held_out = x[:args.eval_examples]
    paused = 0.0  # seconds spent evaluating, not counted as training time

    def evaluate(step, at):
        t0 = time.perf_counter()
        with torch.no_grad():
            nll = sum(bce(model(held_out[i:i + 1000]), held_out[i:i + 1000]).sum().item()
                      for i in range(0, held_out.shape[0], 1000)) / held_out.shape[0]
            l2 = sum((w * w).sum().item() for w in model.parameters())
        evals.append((step, at, nll + 0.5 * args.l2_reg * l2))
        return time.perf_counter() - t0

    start = time.perf_counter()
    step = 0
    next_eval = 0.0
    if args.eval_every_seconds > 0:
        paused += evaluate(0, 0.0)
        next_eval = args.eval_every_seconds
    while True:
        idx = torch.randint(0, x.shape[0], (args.batch_size,), generator=gen)
        batch = x[idx]
        # Multi-Bernoulli NLL summed over pixels, mean over the batch, plus l2/2 ||θ||².
        nll = bce(model(batch), batch).sum(dim=1).mean()
        l2 = sum((w * w).sum() for w in model.parameters())
        loss = nll + 0.5 * args.l2_reg * l2
        opt.zero_grad()
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - start - paused
        rows.append((step, elapsed, loss.item()))
        step += 1
        if args.eval_every_seconds > 0 and elapsed >= next_eval:
            paused += evaluate(step, elapsed)
            while next_eval <= elapsed:
                next_eval += args.eval_every_seconds
        if elapsed > args.max_seconds:
            break
    if args.eval_every_seconds > 0 and evals[-1][0] != step:
        evaluate(step, elapsed)
    with open(args.csv, "w") as f:
        f.write("step,seconds,loss\n")
        for r in rows:
            f.write(f"{r[0]},{r[1]},{r[2]}\n")
    if evals:
        with open(args.eval_csv, "w") as f:
            f.write("step,seconds,loss\n")
            for r in evals:
                f.write(f"{r[0]},{r[1]},{r[2]}\n")
    print(f"torch adam lr {args.learning_rate}: {step} steps in {elapsed:.1f} s, "
          f"final loss {rows[-1][2]:.3f}")


if __name__ == "__main__":
    main()
