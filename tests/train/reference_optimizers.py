"""Optimizer and gradient-clipping references for tests/train/test_optimizers.cpp.

Reads OUT_DIR/layout.json (the C++ ParameterLayout: name, offset, numel, segment, decays per parameter), draws
initial parameters and per-step gradients, and runs each case with its reference:
  adamw, sgd      -> torch.optim.AdamW / torch.optim.SGD, one param group per (segment, decays) so that weight
                     decay and the layer-wise learning-rate factor apply exactly as vitpipe documents;
  adamw-nobc      -> torch.optim.AdamW's own tensor operations with the bias corrections left out;
  lamb            -> numpy, the formula documented in src/train/optimizer.h, in float32 with norms in float64;
  clipping        -> torch.nn.utils.clip_grad_norm_.
Writes raw little-endian float32 arrays (*.f32) and OUT_DIR/expected.json describing them."""
import json
import math
import sys

import numpy as np
import torch

STEPS = 4
LRS = [1e-3, 2e-3, 5e-4, 1.5e-3]

CASES = [
    {"name": "adamw", "optimizer": "adamw", "weight_decay": 0.05},
    {"name": "adamw_layer_decay", "optimizer": "adamw", "weight_decay": 0.1, "beta1": 0.8, "beta2": 0.95,
     "eps": 1e-6, "layer_decay": 0.75},
    {"name": "adamw_decay_all", "optimizer": "adamw", "weight_decay": 0.01, "decay_all": True},
    {"name": "adamw_nobc", "optimizer": "adamw-nobc", "weight_decay": 0.05, "layer_decay": 0.9},
    {"name": "lamb", "optimizer": "lamb", "weight_decay": 0.01, "eps": 1e-6},
    {"name": "lamb_layer_decay", "optimizer": "lamb", "weight_decay": 0.1, "beta1": 0.85, "beta2": 0.98,
     "eps": 1e-6, "layer_decay": 0.8},
    {"name": "lamb_nobc", "optimizer": "lamb-nobc", "weight_decay": 0.01, "eps": 1e-6},
    {"name": "sgd_momentum", "optimizer": "sgd", "momentum": 0.9, "weight_decay": 1e-4},
    {"name": "sgd_nesterov", "optimizer": "sgd", "momentum": 0.9, "nesterov": True, "weight_decay": 1e-3,
     "layer_decay": 0.7},
    {"name": "sgd_dampening", "optimizer": "sgd", "momentum": 0.5, "dampening": 0.25, "decay_all": True,
     "weight_decay": 1e-2},
    {"name": "sgd_plain", "optimizer": "sgd", "weight_decay": 0.01},
]


def defaults(case):
    full = {"weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "momentum": 0.0, "dampening": 0.0,
            "nesterov": False, "layer_decay": 1.0, "decay_all": False}
    full.update(case)
    return full


def groups_of(specs, num_segments, case):
    """(segment, decays) -> indices of specs, with the group's lr factor and weight decay."""
    groups = {}
    for i, s in enumerate(specs):
        decays = case["decay_all"] or s["decays"]
        groups.setdefault((s["segment"], decays), []).append(i)
    out = []
    for (segment, decays), members in sorted(groups.items()):
        scale = case["layer_decay"] ** (num_segments - 1 - segment)
        out.append((members, scale, case["weight_decay"] if decays else 0.0, decays))
    return out


def run_torch(case, specs, num_segments, params0, grads):
    tensors = [torch.tensor(params0[s["offset"]:s["offset"] + s["numel"]]).clone().requires_grad_(True)
               for s in specs]
    groups = groups_of(specs, num_segments, case)
    param_groups = [{"params": [tensors[i] for i in members], "scale": scale, "weight_decay": wd}
                    for members, scale, wd, _ in groups]
    if case["optimizer"] == "adamw":
        opt = torch.optim.AdamW(param_groups, lr=LRS[0], betas=(case["beta1"], case["beta2"]), eps=case["eps"])
    else:
        opt = torch.optim.SGD(param_groups, lr=LRS[0], momentum=case["momentum"], dampening=case["dampening"],
                              nesterov=case["nesterov"])
    for step in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = LRS[step] * g["scale"]
        for s, t in zip(specs, tensors):
            t.grad = torch.tensor(grads[step, s["offset"]:s["offset"] + s["numel"]]).clone()
        opt.step()
    result = {"params": torch.cat([t.detach() for t in tensors]).numpy()}
    if case["optimizer"] == "adamw":
        result["exp_avg"] = torch.cat([opt.state[t]["exp_avg"] for t in tensors]).numpy()
        result["exp_avg_sq"] = torch.cat([opt.state[t]["exp_avg_sq"] for t in tensors]).numpy()
    elif case["momentum"] != 0:
        result["momentum_buffer"] = torch.cat([opt.state[t]["momentum_buffer"] for t in tensors]).numpy()
    return result


def run_adamw_nobc(case, specs, num_segments, params0, grads):
    """torch.optim.AdamW's _single_tensor_adamw operations, bias corrections removed."""
    p = torch.tensor(params0).clone()
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    groups = groups_of(specs, num_segments, case)
    for step in range(STEPS):
        g_all = torch.tensor(grads[step])
        for members, scale, wd, _ in groups:
            lr = LRS[step] * scale
            for i in members:
                sl = slice(specs[i]["offset"], specs[i]["offset"] + specs[i]["numel"])
                param, grad, exp_avg, exp_avg_sq = p[sl], g_all[sl], m[sl], v[sl]
                param.mul_(1 - lr * wd)
                exp_avg.mul_(case["beta1"]).add_(grad, alpha=1 - case["beta1"])
                exp_avg_sq.mul_(case["beta2"]).addcmul_(grad, grad, value=1 - case["beta2"])
                denom = exp_avg_sq.sqrt().add_(case["eps"])
                param.addcdiv_(exp_avg, denom, value=-lr)
    return {"params": p.numpy(), "exp_avg": m.numpy(), "exp_avg_sq": v.numpy()}


def run_lamb(case, specs, num_segments, params0, grads):
    f = np.float32
    p = params0.copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    b1, b2, eps = f(case["beta1"]), f(case["beta2"]), f(case["eps"])
    groups = groups_of(specs, num_segments, case)
    bias_correction = case["optimizer"] == "lamb"
    for step in range(STEPS):
        t = step + 1
        bc1 = f(1 - case["beta1"] ** t) if bias_correction else f(1)
        bc2 = f(1 - case["beta2"] ** t) if bias_correction else f(1)
        for members, scale, wd, decays in groups:
            for i in members:
                sl = slice(specs[i]["offset"], specs[i]["offset"] + specs[i]["numel"])
                g = grads[step, sl]
                m[sl] = m[sl] * b1 + f(1 - case["beta1"]) * g
                v[sl] = v[sl] * b2 + f(1 - case["beta2"]) * g * g
                u = (m[sl] / bc1) / (np.sqrt(v[sl] / bc2) + eps) + f(wd) * p[sl]
                pn = math.sqrt(np.sum(p[sl].astype(np.float64) ** 2))
                un = math.sqrt(np.sum(u.astype(np.float64) ** 2))
                ratio = pn / un if (decays and pn > 0 and un > 0) else 1.0
                p[sl] = p[sl] - f(LRS[step] * scale * ratio) * u
    return {"params": p, "exp_avg": m, "exp_avg_sq": v}


def main(out_dir):
    layout = json.load(open(f"{out_dir}/layout.json"))
    specs, num_segments, numel = layout["specs"], layout["num_segments"], layout["numel"]
    rng = np.random.default_rng(1234)
    params0 = (rng.normal(size=numel) * 0.02).astype(np.float32)
    # A decaying parameter that starts at zero: LAMB's trust ratio must fall back to 1 (||p|| = 0).
    zero = next(s for s in specs if s["decays"] and s["segment"] == 1)
    params0[zero["offset"]:zero["offset"] + zero["numel"]] = 0
    grads = rng.normal(size=(STEPS, numel)).astype(np.float32)
    grads[:, :7] = 0  # some exact zeros
    params0.tofile(f"{out_dir}/params0.f32")
    grads.tofile(f"{out_dir}/grads.f32")

    expected = {"steps": STEPS, "lrs": LRS, "zero_param": zero["name"], "cases": []}
    for raw in CASES:
        case = defaults(raw)
        if case["optimizer"] in ("adamw", "sgd"):
            result = run_torch(case, specs, num_segments, params0, grads)
        elif case["optimizer"] == "adamw-nobc":
            result = run_adamw_nobc(case, specs, num_segments, params0, grads)
        else:
            result = run_lamb(case, specs, num_segments, params0, grads)
        files = {}
        for key, array in result.items():
            path = f"{case['name']}_{key}.f32"
            np.asarray(array, dtype=np.float32).tofile(f"{out_dir}/{path}")
            files[key] = path
        expected["cases"].append({"config": case, "files": files})

    # Clipping: the first step's gradients, scaled so that clipping does and does not happen.
    clip = []
    for factor, max_norm in [(1.0, 1.0), (1e-3, 10.0), (1.0, 1e9)]:
        g = grads[0] * np.float32(factor)
        tensors = [torch.zeros(s["numel"], requires_grad=True) for s in specs]
        for s, t in zip(specs, tensors):
            t.grad = torch.tensor(g[s["offset"]:s["offset"] + s["numel"]]).clone()
        norm = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
        path = f"clip_{len(clip)}.f32"
        torch.cat([t.grad for t in tensors]).numpy().tofile(f"{out_dir}/{path}")
        clip.append({"factor": factor, "max_norm": max_norm, "norm": float(norm),
                     "norm64": math.sqrt(np.sum(g.astype(np.float64) ** 2)), "clipped": path})
    expected["clip"] = clip
    json.dump(expected, open(f"{out_dir}/expected.json", "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
