#!/usr/bin/env python3
"""neuraloperator 2.0.0's Darcy seed example (the reference for fno_train --config configs/darcy.yaml).

Same data (data/darcy), model, optimizer, schedule, losses and epochs; prints the
final metrics and the wall time of Trainer.train as one JSON line.

    python3 bench/neuralop_darcy.py [--device cuda] [--seed 0]
"""
import argparse
import json
import os
import time

import torch
from neuralop import H1Loss, LpLoss, Trainer
from neuralop.data.datasets.darcy import DarcyDataset
from neuralop.models import FNO
from neuralop.training import AdamW


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "darcy")
    ds = DarcyDataset(root_dir=root, n_train=1000, n_tests=[100, 50], batch_size=32,
                      test_batch_sizes=[32, 32], train_resolution=16, test_resolutions=[16, 32],
                      download=False)
    train_loader = torch.utils.data.DataLoader(ds.train_db, batch_size=32, num_workers=0, pin_memory=True)
    test_loaders = {r: torch.utils.data.DataLoader(ds.test_dbs[r], batch_size=32, shuffle=False,
                                                   num_workers=0, pin_memory=True) for r in (16, 32)}
    processor = ds.data_processor.to(args.device)
    model = FNO(n_modes=(16, 16), in_channels=1, out_channels=1, hidden_channels=32,
                projection_channel_ratio=2).to(args.device)
    opt = AdamW(model.parameters(), lr=8e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)
    h1, l2 = H1Loss(d=2), LpLoss(d=2, p=2)
    trainer = Trainer(model=model, n_epochs=args.epochs, device=args.device, data_processor=processor,
                      eval_interval=1, verbose=False)  # fno_train evaluates every epoch too
    t0 = time.perf_counter()
    trainer.train(train_loader=train_loader, test_loaders=test_loaders, optimizer=opt,
                            scheduler=sched, regularizer=False, training_loss=h1,
                            eval_losses={"h1": h1, "l2": l2})
    wall = time.perf_counter() - t0
    out = {}
    for r, loader in test_loaders.items():
        out.update({k: float(v) for k, v in trainer.evaluate({"h1": h1, "l2": l2}, loader,
                                                             log_prefix=str(r)).items()})
    print(json.dumps({"impl": "neuraloperator-2.0.0", "device": args.device, "seed": args.seed,
                      "wall_seconds": wall, "metrics": out}))


if __name__ == "__main__":
    main()
