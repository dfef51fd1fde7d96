"""Learning rates a transformers Trainer would use at each optimizer step, written to OUT_DIR/lr_cases.json.

transformers is not installed here, so its three schedule lambdas and Trainer.get_warmup_steps are copied verbatim
(transformers 4.x, optimization.py / training_args.py); they run under torch's own LambdaLR, stepped after the
optimizer as Trainer does, and we record the lr each optimizer.step() actually saw."""
import json
import math
import sys

import torch


def _get_constant_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def _get_linear_schedule_with_warmup_lr_lambda(current_step: int, *, num_warmup_steps: int, num_training_steps: int):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def _get_cosine_schedule_with_warmup_lr_lambda(
    current_step: int, *, num_warmup_steps: int, num_training_steps: int, num_cycles: float
):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress)))


def get_warmup_steps(num_training_steps: int, warmup_steps: int, warmup_ratio: float):
    return warmup_steps if warmup_steps > 0 else math.ceil(num_training_steps * warmup_ratio)


def lambda_for(kind, warmup, total):
    if kind == "constant":
        return lambda s: _get_constant_schedule_with_warmup_lr_lambda(s, num_warmup_steps=warmup)
    if kind == "linear":
        return lambda s: _get_linear_schedule_with_warmup_lr_lambda(s, num_warmup_steps=warmup,
                                                                    num_training_steps=total)
    return lambda s: _get_cosine_schedule_with_warmup_lr_lambda(s, num_warmup_steps=warmup,
                                                                num_training_steps=total, num_cycles=0.5)


def main(out_dir):
    cases = []
    configs = [("cosine", 2e-4, 1000, 0, 0.25), ("cosine", 1e-3, 37, 5, 0.0), ("cosine", 5e-5, 10, 0, 0.0),
               ("linear", 5e-5, 200, 0, 0.1), ("linear", 3e-4, 13, 4, 0.0), ("linear", 1e-4, 7, 0, 0.33),
               ("constant", 1e-3, 50, 0, 0.06), ("constant", 2e-5, 20, 20, 0.0), ("cosine", 1e-4, 1, 0, 0.5),
               ("cosine", 2e-4, 2022, 0, 0.07)]
    for kind, lr, total, warmup_steps, warmup_ratio in configs:
        warmup = get_warmup_steps(total, warmup_steps, warmup_ratio)
        param = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([param], lr=lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda_for(kind, warmup, total))
        lrs = []
        for _ in range(total + 3):  # a few steps past the end too
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        cases.append({"kind": kind, "base_lr": lr, "total": total, "warmup_steps": warmup_steps,
                      "warmup_ratio": warmup_ratio, "warmup": warmup, "lrs": lrs})
    with open(f"{out_dir}/lr_cases.json", "w") as f:
        json.dump(cases, f)


if __name__ == "__main__":
    main(sys.argv[1])
