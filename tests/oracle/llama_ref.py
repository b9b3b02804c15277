#!/usr/bin/python3
"""llama_ref.py - float64 PyTorch oracle for primus' native Llama trainer.

An independent reference of HF LlamaForCausalLM (no transformers, no
safetensors packages), the data sampling, AdamW schedule and gradient clipping
of primus' contract, plus its own safetensors / config.json / Megatron
MMIDIDX readers and writers. Subcommands:
  make-case  random HF checkpoint + indexed dataset + primus exp.yaml
  reference  float64 step-1 loss/grads, then N AdamW steps -> ref.json, ref_*.safetensors
  compare    check a primus run against the reference (non-zero exit on failure)
  selftest   reference vs a naive loop implementation, autograd gradcheck, file round trips

Mixture of experts (make-case --experts E ...): Mixtral-style MoE MLPs on
every moe_layer_freq-th layer (layer i when i % freq == 0): softmax router,
top-k renormalised weights, SwiGLU experts w1/w3/w2, an optional shared
expert, optional capacity (assignments t*k+j over capacity dropped in that
order), and the Switch aux loss coeff*E*sum f_e P_e and z loss
coeff*mean(logsumexp^2) added to the objective once per micro-batch
(averaged over micro-batches, as primus does); the logged loss is the
cross-entropy alone.

Attention variants (make-case --qkv-bias / --qk-norm / --head-dim D /
--rope-factor F): Qwen2's q/k/v biases (model_type qwen2), Qwen3's RMSNorm
of each head's q and k before RoPE with weights q_norm/k_norm of size D
(model_type qwen3) and a head width D of its own (head_dim: q_proj (H*D, C),
o_proj (C, H*D)), and Llama 3.1's RoPE frequency scaling (rope_scaling with
rope_type llama3: factor, low_freq_factor 1, high_freq_factor 4,
original_max_position_embeddings 8192, Megatron's use_rope_scaling values),
written as transformers' _compute_llama3_parameters computes it.

End-of-document loss mask (make-case --eod-tokenizer tok.json): every document
ends with the tokenizer's EOD id; the loss leaves out the positions whose input
is EOD and averages each micro-batch's masked mean over the micro-batches
(Megatron-LM's eod_mask_loss with calculate_per_token_loss false); with MoE the
router's aux and z losses still take every token of a micro-batch, as
Megatron-LM's router (it sees no loss mask).
"""
import argparse, json, math, os, struct, sys
import numpy as np
import torch

torch.set_num_threads(1)
DT = torch.float64

# ---------------------------------------------------------------- file formats
ST_NP = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I32": np.int32, "I64": np.int64}


def st_write(path, tensors, dtype="F32", meta=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name].detach().cpu().numpy().astype(ST_NP[dtype]).newbyteorder("<"))
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def st_read(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header, base, out = json.loads(raw[8:8 + n]), 8 + n, {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(raw[base + b:base + end], dtype=np.dtype(ST_NP[e["dtype"]]).newbyteorder("<"))
        out[name] = torch.from_numpy(a.astype(np.float64).reshape(e["shape"]))
    return out


def idx_write(prefix, docs):
    dt, code = (np.uint16, 8) if max(max(d) for d in docs) < 65500 else (np.int32, 4)
    sizes = np.array([len(d) for d in docs], np.int32)
    ptrs = np.concatenate([[0], np.cumsum(sizes[:-1].astype(np.int64) * np.dtype(dt).itemsize)]).astype(np.int64)
    with open(prefix + ".bin", "wb") as f:
        f.write(np.concatenate([np.asarray(d, dt) for d in docs]).astype(np.dtype(dt).newbyteorder("<")).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(docs), len(docs) + 1))
        f.write(sizes.astype("<i4").tobytes() + ptrs.astype("<i8").tobytes() + np.arange(len(docs) + 1, dtype="<i8").tobytes())


def idx_read(prefix):
    raw = open(prefix + ".idx", "rb").read()
    assert raw[:9] == b"MMIDIDX\x00\x00"
    ver, code, n, nd = struct.unpack("<QBQQ", raw[9:34])
    assert ver == 1 and nd == n + 1
    dt = {8: np.uint16, 4: np.int32}[code]
    sizes = np.frombuffer(raw, "<i4", n, 34)
    ptrs = np.frombuffer(raw, "<i8", n, 34 + 4 * n)
    data = np.fromfile(prefix + ".bin", np.dtype(dt).newbyteorder("<"))
    isz = np.dtype(dt).itemsize
    return [data[p // isz:p // isz + s].astype(np.int64) for p, s in zip(ptrs, sizes)]


def load_config(hf_dir, e=None):
    c = json.load(open(os.path.join(hf_dir, "config.json")))
    cfg = dict(C=c["hidden_size"], F=c["intermediate_size"], H=c["num_attention_heads"],
               G=c.get("num_key_value_heads") or c["num_attention_heads"], L=c["num_hidden_layers"],
               V=c["vocab_size"], eps=c["rms_norm_eps"], theta=c.get("rope_theta", 10000.0),
               tied=c.get("tie_word_embeddings", True), E=0)
    mt = c.get("model_type", "llama")
    cfg.update(D=c.get("head_dim") or cfg["C"] // cfg["H"],
               bias=mt == "qwen2" or bool(c.get("primus_qkv_bias")),
               qkn=mt == "qwen3" or bool(c.get("primus_qk_norm")), rope=None)
    rs = c.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        cfg["rope"] = (rs["factor"], rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0),
                       rs.get("original_max_position_embeddings", 8192))
    if c.get("model_type") == "mixtral":  # intermediate_size is an expert's
        cfg.update(E=c["num_local_experts"], K=c.get("num_experts_per_tok", 2), Fe=c["intermediate_size"],
                   F=c.get("primus_dense_intermediate_size", c["intermediate_size"]),
                   freq=c.get("primus_moe_layer_freq", 1), Fs=c.get("shared_expert_intermediate_size", 0))
        e = e or {}
        cfg.update(aux=e.get("moe_aux_loss_coeff", 0.0), zc=e.get("moe_z_loss_coeff", 0.0),
                   cap=e.get("moe_expert_capacity_factor", 0.0))
        if e.get("moe_router_load_balancing_type") == "none":
            cfg["aux"] = 0.0
    return cfg


def is_moe(cfg, i):
    return cfg.get("E", 0) > 0 and i % cfg["freq"] == 0


# ---------------------------------------------------------------- the model
def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def inv_freq(cfg, D):
    """RoPE's inverse frequencies; Llama 3.1's scaling as transformers writes it."""
    inv = cfg["theta"] ** (-torch.arange(0, D, 2, dtype=DT) / D)
    if not cfg.get("rope"):
        return inv
    factor, lo, hi, orig = cfg["rope"]
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > orig / lo, inv / factor, inv)
    smooth = (orig / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < orig / hi) & ~(wavelen > orig / lo)
    return torch.where(medium, smoothed, out)


def rope(x, cfg):  # x: (B, heads, T, D), HF rotate-half: pairs (i, i + D/2)
    T, D = x.shape[-2], x.shape[-1]
    inv = inv_freq(cfg, D)
    ang = torch.arange(T, dtype=DT)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rot * sin


def swiglu(x, wg, wu, wd):
    return (torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)) @ wd.T


def moe_mlp(P, p, h, cfg, aux):
    """Mixtral MoE of h (B, T, C); appends this layer's aux and z losses (and stats) to aux."""
    E, K, C = cfg["E"], cfg["K"], cfg["C"]
    x = h.reshape(-1, C)
    N = x.shape[0]
    logits = x @ P[p + "block_sparse_moe.gate.weight"].T
    prob = torch.softmax(logits, -1)
    topv, topi = torch.topk(prob, K, -1)
    w = topv / topv.sum(-1, keepdim=True)
    cap = math.ceil(cfg["cap"] * N * K / E) if cfg.get("cap") else N * K
    out = torch.zeros_like(x)
    counts, dropped = [], 0
    for e in range(E):
        t, j = (topi == e).nonzero(as_tuple=True)  # row-major: assignment order t*K + j
        counts.append(len(t))
        dropped += max(0, len(t) - cap)
        t, j = t[:cap], j[:cap]
        q = "%sblock_sparse_moe.experts.%d." % (p, e)
        y = swiglu(x[t], P[q + "w1.weight"], P[q + "w3.weight"], P[q + "w2.weight"])
        out = out.index_add(0, t, y * w[t, j][:, None])
    if cfg.get("Fs"):
        q = p + "block_sparse_moe.shared_expert."
        out = out + swiglu(x, P[q + "gate_proj.weight"], P[q + "up_proj.weight"], P[q + "down_proj.weight"])
    f = torch.tensor(counts, dtype=DT) / (N * K)
    lb = cfg.get("aux", 0.0) * E * (f * prob.mean(0)).sum()
    zl = cfg.get("zc", 0.0) * (torch.logsumexp(logits, -1) ** 2).mean()
    aux.append({"aux": lb, "z": zl, "counts": counts, "dropped": dropped})
    return out.view(h.shape)


def forward(P, cfg, tok, aux=None):  # tok: (B, T) -> logits (B, T, V); MoE losses appended to aux
    C, H, G, eps = cfg["C"], cfg["H"], cfg["G"], cfg["eps"]
    D, (B, T) = cfg.get("D") or C // H, tok.shape
    x = P["model.embed_tokens.weight"][tok]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["L"]):
        p = "model.layers.%d." % i
        h = rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q, k, v = (h @ P[p + "self_attn.%s_proj.weight" % t].T for t in "qkv")
        if cfg.get("bias"):
            q, k, v = (y + P[p + "self_attn.%s_proj.bias" % t] for y, t in zip((q, k, v), "qkv"))
        q, k, v = q.view(B, T, H, D), k.view(B, T, G, D), v.view(B, T, G, D)
        if cfg.get("qkn"):  # each head's D values
            q, k = rmsnorm(q, P[p + "self_attn.q_norm.weight"], eps), rmsnorm(k, P[p + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = rope(q, cfg), rope(k, cfg)
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)  # head h -> group h // (H/G)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, H * D) @ P[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        if is_moe(cfg, i):
            x = x + moe_mlp(P, p, h, cfg, aux if aux is not None else [])
            continue
        g = torch.nn.functional.silu(h @ P[p + "mlp.gate_proj.weight"].T) * (h @ P[p + "mlp.up_proj.weight"].T)
        x = x + g @ P[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, P["model.norm.weight"], eps)
    return x @ P.get("lm_head.weight", P["model.embed_tokens.weight"]).T


def loss_fn(P, cfg, inp, tgt, fwd=forward):
    lg = fwd(P, cfg, inp)
    return torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1))


def objective(P, cfg, inp, tgt, mbs):
    """(objective, cross-entropy, aux, z): the mean cross-entropy plus, for MoE, each
    micro-batch's summed aux and z losses averaged over the micro-batches. With an
    EOD id (eod_mask_loss, Megatron-LM's loss mask and reduction), positions whose
    input is EOD leave the loss, and the cross-entropy is the mean over the
    micro-batches of each one's mean over its unmasked targets."""
    if cfg.get("eod") is not None:  # MoE: the router's losses over every token (no mask there)
        total, lb, zl, nmb = 0.0, 0.0, 0.0, 0
        for b in range(0, inp.shape[0], mbs):
            aux = []
            lg = forward(P, cfg, inp[b:b + mbs], aux)
            keep = (inp[b:b + mbs] != cfg["eod"]).reshape(-1).to(DT)
            ce = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt[b:b + mbs].reshape(-1),
                                                   reduction="none")
            n = keep.sum()
            total = total + ((ce * keep).sum() / n if n > 0 else 0.0 * ce.sum())
            lb = lb + sum(a["aux"] for a in aux)
            zl = zl + sum(a["z"] for a in aux)
            nmb += 1
        ce = total / nmb
        return ce + (lb + zl) / nmb, ce, float(lb) / nmb, float(zl) / nmb
    if not cfg.get("E"):
        ce = loss_fn(P, cfg, inp, tgt)
        return ce, ce, 0.0, 0.0
    ce_sum, lb, zl, nmb = 0.0, 0.0, 0.0, 0
    for b in range(0, inp.shape[0], mbs):
        aux = []
        lg = forward(P, cfg, inp[b:b + mbs], aux)
        ce_sum = ce_sum + torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt[b:b + mbs].reshape(-1), reduction="sum")
        lb = lb + sum(a["aux"] for a in aux)
        zl = zl + sum(a["z"] for a in aux)
        nmb += 1
    ce = ce_sum / tgt.numel()
    return ce + (lb + zl) / nmb, ce, float(lb) / nmb, float(zl) / nmb


# ---------------------------------------------------------------- data, schedule
def batches(docs, S, G, steps):
    stream = np.concatenate(docs)
    N = len(stream)
    for s in range(steps):
        seq = np.stack([stream[(k * S + np.arange(S + 1)) % N] for k in range(s * G, s * G + G)])
        yield torch.from_numpy(seq[:, :S]), torch.from_numpy(seq[:, 1:])


def lr_at(s, e):  # s: 1-based optimizer step
    lr, mn, wu, di = e["lr"], e["min_lr"], e["lr_warmup_iters"], e.get("lr_decay_iters") or e["train_iters"]
    if s <= wu:
        return lr * s / wu
    return mn + 0.5 * (lr - mn) * (1 + math.cos(math.pi * min(1.0, (s - wu) / (di - wu))))


def read_exp(case):  # the overrides of the flat exp.yaml written by make-case
    e = {}
    for line in open(os.path.join(case, "exp.yaml")):
        if line.startswith("      ") and ":" in line:
            k, v = (t.strip() for t in line.split(":", 1))
            try:
                e[k] = int(v)
            except ValueError:
                try:
                    e[k] = float(v)
                except ValueError:
                    e[k] = v.strip('"')
    return e


def train(P0, cfg, docs, e, steps, clip):
    """float64 AdamW run; returns (history, step-1 grads, final weights)."""
    P = {k: v.clone().to(DT).requires_grad_(True) for k, v in P0.items()}
    names = sorted(P)
    groups = [{"params": [P[k] for k in names if P[k].dim() >= 2], "weight_decay": e["weight_decay"]},
              {"params": [P[k] for k in names if P[k].dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=e["lr"], betas=(e["adam_beta1"], e["adam_beta2"]), eps=e["adam_eps"])
    hist, g1 = [], None
    for s, (inp, tgt) in enumerate(batches(docs, e["seq_length"], e["global_batch_size"], steps), 1):
        opt.zero_grad(set_to_none=True)
        obj, loss, lb, zl = objective(P, cfg, inp, tgt, e.get("micro_batch_size", inp.shape[0]))
        obj.backward()
        if s == 1:
            g1 = {k: P[k].grad.detach().clone() for k in names}
        params = [P[k] for k in names]
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm=clip)
        else:
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
        lr = lr_at(s, e)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        hist.append({"step": s, "loss": loss.item(), "grad_norm": norm.item(), "lr": lr,
                     "clipped": bool(clip > 0 and norm.item() > clip), "aux": lb, "z": zl})
        if cfg.get("eod") is not None:
            hist[-1]["loss_tokens"] = int((inp != cfg["eod"]).sum())
    return hist, g1, {k: v.detach() for k, v in P.items()}


def hf_names(cfg):
    L, tied = cfg["L"], cfg["tied"]
    n = ["model.embed_tokens.weight", "model.norm.weight"] + ([] if tied else ["lm_head.weight"])
    for i in range(L):
        p = "model.layers.%d." % i
        n += [p + "self_attn.%s_proj.weight" % t for t in "qkvo"]
        if cfg.get("bias"):
            n += [p + "self_attn.%s_proj.bias" % t for t in "qkv"]
        if cfg.get("qkn"):
            n += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
        if is_moe(cfg, i):
            n += [p + "block_sparse_moe.gate.weight"]
            n += [p + "block_sparse_moe.experts.%d.%s.weight" % (e, w) for e in range(cfg["E"]) for w in ("w1", "w2", "w3")]
            if cfg.get("Fs"):
                n += [p + "block_sparse_moe.shared_expert.%s_proj.weight" % t for t in ("gate", "up", "down")]
        else:
            n += [p + "mlp.%s_proj.weight" % t for t in ("gate", "up", "down")]
        n += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    return n


def random_model(cfg, gen):
    C, F, H, G, V = cfg["C"], cfg["F"], cfg["H"], cfg["G"], cfg["V"]
    D = cfg.get("D") or C // H
    shapes = {"q": (H * D, C), "k": (G * D, C), "v": (G * D, C), "o": (C, H * D), "gate": (F, C), "up": (F, C), "down": (C, F)}
    # q/k large enough that attention is far from uniform (RoPE and the mask matter); norms ~1 +- noise
    std = {"q": C ** -0.5, "k": C ** -0.5, "v": 0.05, "o": 0.05, "gate": 0.05, "up": 0.05, "down": 0.05}
    if cfg.get("E"):  # router logits O(1) apart; experts like the dense MLP
        Fe, Fs = cfg["Fe"], cfg.get("Fs", 0)
        shapes.update(router=(cfg["E"], C), w1=(Fe, C), w3=(Fe, C), w2=(C, Fe), sgate=(Fs, C), sup=(Fs, C), sdown=(C, Fs))
        std.update(router=2 * C ** -0.5, w1=0.05, w3=0.05, w2=0.05, sgate=0.05, sup=0.05, sdown=0.05)
    P = {}
    for n in hf_names(cfg):
        t = n.split(".")[-2].replace("_proj", "")
        if n.endswith("block_sparse_moe.gate.weight"):
            t = "router"
        elif "shared_expert" in n:
            t = "s" + t
        if n.endswith("q_norm.weight") or n.endswith("k_norm.weight"):
            P[n] = 1 + 0.2 * torch.randn(D, generator=gen, dtype=DT)
        elif n.endswith("norm.weight") or "layernorm" in n:
            P[n] = 1 + 0.2 * torch.randn(C, generator=gen, dtype=DT)
        elif n.endswith(".bias"):  # q/k/v biases that move the scores
            P[n] = 0.3 * torch.randn(shapes[t][0], generator=gen, dtype=DT)
        elif n in ("model.embed_tokens.weight", "lm_head.weight"):
            P[n] = 0.1 * torch.randn(V, C, generator=gen, dtype=DT)
        else:
            P[n] = std[t] * torch.randn(*shapes[t], generator=gen, dtype=DT)
    return {k: v.float().double() for k, v in P.items()}  # exactly representable in f32


EXP = """work_group: oracle
user_name: test
exp_name: {name}
workspace: {d}/out
modules:
  pre_trainer:
    framework: native
    config: pre_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      hidden_size: {C}
      num_layers: {L}
      num_attention_heads: {H}
      num_query_groups: {G}
      ffn_hidden_size: {F}
      vocab_size: {V}
      make_vocab_size_divisible_by: 1
      seq_length: {S}
      max_position_embeddings: {S}
      untie_embeddings_and_output_weights: {untied}
      norm_epsilon: {eps}
      rotary_base: {theta}
      tokenizer_type: {tok}
      data_path: {d}/data
      split: "1,0,0"
      data_shuffle: false
      micro_batch_size: {mbs}
      global_batch_size: {gbs}
      train_iters: {steps}
      lr: {lr}
      min_lr: {min_lr}
      lr_warmup_iters: {warmup}
      lr_decay_style: cosine
      weight_decay: 0.1
      adam_beta1: 0.9
      adam_beta2: 0.95
      adam_eps: 1.0e-8
      clip_grad: {clip}
      load: {d}/hf
      save: {d}/ckpt
      save_interval: {steps}
      eval_iters: 0
      log_interval: 1
{moe}{arch}"""


def cmd_make_case(a):
    d = os.path.abspath(a.out)
    os.makedirs(os.path.join(d, "hf"), exist_ok=True)
    cfg = dict(C=a.hidden, F=a.ffn, H=a.heads, G=a.groups or a.heads, L=a.layers, V=a.vocab, eps=1e-5,
               theta=10000.0, tied=a.tied, E=a.experts, D=a.head_dim or a.hidden // a.heads, bias=a.qkv_bias,
               qkn=a.qk_norm, rope=(a.rope_factor, 1.0, 4.0, 8192) if a.rope_factor else None)
    arch = ""  # the experiment's keys (Megatron's names) for the variants
    if a.head_dim:
        arch += "      kv_channels: %d\n" % a.head_dim
    if a.qkv_bias:
        arch += "      add_qkv_bias: true\n"
    if a.qk_norm:
        arch += "      qk_layernorm: true\n"
    if a.rope_factor:
        arch += "      use_rope_scaling: true\n      rope_scaling_factor: %s\n" % a.rope_factor
    if a.eod_tokenizer:  # eod_mask_loss: the tokenizer's EOD ends every document
        tj = json.load(open(a.eod_tokenizer))
        ids = {t["content"]: t["id"] for t in tj.get("added_tokens", [])}
        cfg["eod"] = next(ids[k] for k in ("<|endoftext|>", "</s>", "<eos>") if k in ids)
        assert cfg["eod"] < a.vocab, "the EOD id must be inside --vocab"
        arch += "      tokenizer_model: %s\n      eod_mask_loss: true\n" % os.path.abspath(a.eod_tokenizer)
        json.dump({"eod": cfg["eod"]}, open(os.path.join(d, "eod.json"), "w"))
    moe = ""
    if a.experts:
        cfg.update(K=a.topk, Fe=a.moe_ffn or a.ffn, freq=a.moe_freq, Fs=a.shared, aux=a.aux, zc=a.zloss, cap=a.capacity)
        moe = "".join("      %s: %s\n" % kv for kv in (
            ("num_experts", a.experts), ("moe_router_topk", a.topk), ("moe_ffn_hidden_size", cfg["Fe"]),
            ("moe_layer_freq", a.moe_freq), ("moe_shared_expert_intermediate_size", a.shared),
            ("moe_aux_loss_coeff", a.aux), ("moe_z_loss_coeff", a.zloss),
            ("moe_router_load_balancing_type", "aux_loss"), ("moe_token_dispatcher_type", "alltoall")))
        if a.capacity:
            moe += "      moe_expert_capacity_factor: %s\n" % a.capacity
    assert (a.head_dim or cfg["C"] % cfg["H"] == 0) and cfg["H"] % cfg["G"] == 0 and cfg["D"] % 2 == 0
    gen = torch.Generator().manual_seed(a.seed)
    P = random_model(cfg, gen)
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg["C"],
          "intermediate_size": cfg["F"], "num_attention_heads": cfg["H"], "num_key_value_heads": cfg["G"],
          "num_hidden_layers": cfg["L"], "vocab_size": cfg["V"], "rms_norm_eps": cfg["eps"],
          "rope_theta": cfg["theta"], "max_position_embeddings": a.seq, "tie_word_embeddings": cfg["tied"],
          "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"}
    if a.qk_norm:
        hf.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3")
    elif a.qkv_bias:
        hf.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2")
        del hf["attention_bias"], hf["mlp_bias"]
    if a.qk_norm and a.qkv_bias:
        hf["primus_qkv_bias"] = True
    if a.head_dim or a.qk_norm:
        hf["head_dim"] = cfg["D"]
    if a.rope_factor:
        hf["rope_scaling"] = {"rope_type": "llama3", "factor": a.rope_factor, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if a.experts:
        hf.update(architectures=["MixtralForCausalLM"], model_type="mixtral", intermediate_size=cfg["Fe"],
                  num_local_experts=a.experts, num_experts_per_tok=a.topk, primus_dense_intermediate_size=cfg["F"],
                  primus_moe_layer_freq=a.moe_freq, shared_expert_intermediate_size=a.shared)
    json.dump(hf, open(os.path.join(d, "hf", "config.json"), "w"), indent=2)
    st_write(os.path.join(d, "hf", "model.safetensors"), P, "F32", {"format": "pt"})
    lens = torch.randint(1, 2 * a.seq + 1, (a.docs,), generator=gen).tolist()
    docs = [torch.randint(0, a.vocab, (n,), generator=gen).numpy() for n in lens]
    if a.eod_tokenizer:
        docs = [np.append(x, cfg["eod"]).astype(x.dtype) for x in docs]
    idx_write(os.path.join(d, "data"), docs)
    e = dict(name=a.name or os.path.basename(d), d=d, C=cfg["C"], L=cfg["L"], H=cfg["H"], G=cfg["G"], F=cfg["F"],
             V=cfg["V"], S=a.seq, untied=str(not a.tied).lower(), eps="1.0e-5", theta=10000,
             tok="HuggingFaceTokenizer" if a.eod_tokenizer else a.tokenizer,
             mbs=a.micro_batch, gbs=a.global_batch, steps=a.steps, lr=a.lr, min_lr=a.min_lr, warmup=a.warmup, clip=0,
             moe=moe, arch=arch)
    ev = dict(lr=a.lr, min_lr=a.min_lr, lr_warmup_iters=a.warmup, train_iters=a.steps, weight_decay=0.1,
              adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8, seq_length=a.seq, global_batch_size=a.global_batch,
              micro_batch_size=a.micro_batch)
    clip = a.clip
    if clip is None:  # auto: the median grad norm of an unclipped run, so some steps clip and some do not
        hist, _, _ = train(P, cfg, docs, ev, a.steps, 0.0)
        clip = float("%.4g" % sorted(h["grad_norm"] for h in hist)[a.steps // 2])
    e["clip"] = clip
    open(os.path.join(d, "exp.yaml"), "w").write(EXP.format(**e))
    n, need = sum(lens), a.steps * a.global_batch * a.seq + 1
    print("case %s: %d params, %d docs / %d tokens (%d needed: %s), clip_grad %g" % (
        d, sum(v.numel() for v in P.values()), a.docs, n, need, "wraps" if need > n else "no wrap", clip))


def cmd_reference(a):
    d = os.path.abspath(a.case)
    e = read_exp(d)
    cfg = load_config(os.path.join(d, "hf"), e)
    P0 = st_read(os.path.join(d, "hf", "model.safetensors"))
    docs = idx_read(os.path.join(d, "data"))
    if os.path.exists(os.path.join(d, "eod.json")):
        cfg["eod"] = json.load(open(os.path.join(d, "eod.json")))["eod"]
    steps = a.steps or e["train_iters"]
    hist, g1, fin = train(P0, cfg, docs, e, steps, e["clip_grad"])
    st_write(os.path.join(d, "ref_grads.safetensors"), g1, "F64")
    st_write(os.path.join(d, "ref_final.safetensors"), fin, "F64")
    json.dump({"clip_grad": e["clip_grad"], "steps": hist}, open(a.out or os.path.join(d, "ref.json"), "w"), indent=1)
    for h in hist:
        print("ref step %2d loss %.10f grad_norm %.8f lr %.6g%s%s" % (
            h["step"], h["loss"], h["grad_norm"], h["lr"], "  (clipped)" if h["clipped"] else "",
            "  aux %.8g z %.8g" % (h["aux"], h["z"]) if cfg.get("E") else ""))


def rel(x, y):  # ||x - y|| / ||y||
    x, y = torch.as_tensor(x, dtype=DT), torch.as_tensor(y, dtype=DT)
    den = y.norm().item()
    return (x - y).norm().item() / (den if den > 0 else 1.0)


def cmd_compare(a):
    d = os.path.abspath(a.case)
    e, ref = read_exp(d), json.load(open(os.path.join(d, "ref.json")))
    cfg = load_config(os.path.join(d, "hf"), e)
    rows, fails = [], []

    def check(what, err, tol, note=""):
        ok = err <= tol  # NaN fails
        rows.append("%-52s %10.3e %8.0e %s %s" % (what, err, tol, "ok  " if ok else "FAIL", note))
        if not ok:
            fails.append(what)

    def fail(what):
        rows.append("%-52s %10s %8s FAIL" % (what, "-", "-"))
        fails.append(what)

    names = set(hf_names(cfg))
    clipped = [h["step"] for h in ref["steps"] if h["clipped"]]
    rows.append("clip_grad %g; reference clipped on steps %s of %d" % (ref["clip_grad"], clipped, len(ref["steps"])))
    if not clipped:
        fail("clipping active on at least one reference step")
    if any(abs(h["grad_norm"] - ref["clip_grad"]) < 1e-4 * ref["clip_grad"] for h in ref["steps"]):
        rows.append("warning: a grad norm is within 1e-4 of clip_grad; the clip decision is fragile")
    # events.jsonl: per-step loss, grad norm, lr
    ev = {}
    try:
        for line in open(os.path.join(a.primus_run, "events.jsonl")):
            if line.strip():
                j = json.loads(line)
                if "step" in j and "loss" in j:
                    ev[int(j["step"])] = j
    except OSError as x:
        fail("events.jsonl readable (%s)" % x)
    missing = [h["step"] for h in ref["steps"] if h["step"] not in ev]
    if missing:
        fail("events.jsonl steps %s present" % missing)
    for h in ref["steps"]:
        s, j = h["step"], ev.get(h["step"])
        if j is None:
            continue
        check("step %2d loss (ref %.8f)" % (s, h["loss"]), abs(j["loss"] - h["loss"]) / abs(h["loss"]), a.tol_loss)
        tn = a.tol_norm if s == 1 else a.tol_norm_later
        check("step %2d grad_norm (ref %.6f%s)" % (s, h["grad_norm"], ", clipped" if h["clipped"] else ""),
              abs(j["grad_norm"] - h["grad_norm"]) / h["grad_norm"], tn)
        if "loss_tokens" in h and j.get("loss_tokens") != h["loss_tokens"]:
            fail("step %2d loss_tokens %s, reference %d" % (s, j.get("loss_tokens"), h["loss_tokens"]))
        if "lr" in j:
            check("step %2d lr (ref %.6g)" % (s, h["lr"]), abs(j["lr"] - h["lr"]) / max(h["lr"], 1e-30), 1e-6)
        if cfg.get("E"):  # the router's losses, events.jsonl "moe": {"aux_loss", "z_loss", "layers"}
            mo = j.get("moe")
            if not mo:
                fail("step %2d moe field present" % s)
                continue
            for k, rk in (("aux_loss", "aux"), ("z_loss", "z")):
                if h[rk] != 0 or mo[k] != 0:
                    check("step %2d moe %s (ref %.8g)" % (s, k, h[rk]), abs(mo[k] - h[rk]) / max(abs(h[rk]), 1e-30), a.tol_loss)
            ntok = e["global_batch_size"] * e["seq_length"] * cfg["K"]
            if [sum(l["counts"]) for l in mo["layers"]] != [ntok] * sum(is_moe(cfg, i) for i in range(cfg["L"])):
                fail("step %2d moe counts sum to tokens x topk per MoE layer" % s)
    # step-1 gradients
    rg = st_read(os.path.join(d, "ref_grads.safetensors"))
    try:
        pg = st_read(a.grads)
    except OSError as x:
        pg = {}
        fail("primus grads readable (%s)" % x)
    if pg and set(pg) != names:
        fail("grad names: missing %s extra %s" % (sorted(names - set(pg)), sorted(set(pg) - names)))
    for n in sorted(names):
        if n in pg:
            if tuple(pg[n].shape) != tuple(rg[n].shape):
                fail("grad %s shape %s != %s" % (n, tuple(pg[n].shape), tuple(rg[n].shape)))
            else:
                check("grad %s" % n, rel(pg[n], rg[n]), a.tol_grad, "|g|=%.3e" % rg[n].norm().item())
    # final weights: total update W_final - W_init
    ck = os.path.join(a.ckpt, "iter_%07d" % len(ref["steps"]), "model.safetensors")
    try:
        it = open(os.path.join(a.ckpt, "latest_checkpointed_iteration.txt")).read().strip()
        if it != str(len(ref["steps"])):
            fail("latest_checkpointed_iteration.txt is %r" % it)
    except OSError:
        fail("latest_checkpointed_iteration.txt present")
    w0, rf = st_read(os.path.join(d, "hf", "model.safetensors")), st_read(os.path.join(d, "ref_final.safetensors"))
    try:
        pf = st_read(ck)
    except OSError as x:
        pf = {}
        fail("final checkpoint readable (%s)" % x)
    if pf and set(pf) != names:
        fail("checkpoint names: missing %s extra %s" % (sorted(names - set(pf)), sorted(set(pf) - names)))
    for n in sorted(names):
        if n in pf and tuple(pf[n].shape) == tuple(rf[n].shape):
            check("update %s" % n, rel(pf[n] - w0[n], rf[n] - w0[n]), a.tol_update,
                  "|dW|=%.3e" % (rf[n] - w0[n]).norm().item())
        elif n in pf:
            fail("final %s shape %s" % (n, tuple(pf[n].shape)))
    print("%-52s %10s %8s" % ("quantity", "rel.err", "tol"))
    print("\n".join(rows))
    print("%s: %d checks failed%s" % (os.path.basename(d), len(fails), (": " + ", ".join(fails[:8])) if fails else ""))
    return 1 if fails else 0


def naive_loss(P, cfg, inp, tgt):
    """The same model written differently: numpy, loops over heads and positions,
    RoPE as complex multiplication of (x_i + i x_{i+D/2}), GQA by index arithmetic."""
    C, H, G, L, eps, th = cfg["C"], cfg["H"], cfg["G"], cfg["L"], cfg["eps"], cfg["theta"]
    D, W = cfg.get("D") or C // H, {k: v.detach().numpy() for k, v in P.items()}
    B, T = inp.shape
    norm = lambda v, w: v / np.sqrt((v * v).sum(-1, keepdims=True) / v.shape[-1] + eps) * w
    freqs = []  # Llama 3.1's bands by the ratio r = orig / wavelength, one frequency at a time
    for i in range(D // 2):
        f = th ** (-2.0 * i / D)
        if cfg.get("rope"):
            factor, lo, hi, orig = cfg["rope"]
            r = orig * f / (2 * math.pi)
            f = f / factor if r < lo else f if r > hi else f * ((1 - (r - lo) / (hi - lo)) / factor + (r - lo) / (hi - lo))
        freqs.append(f)
    rot = lambda v, t: (lambda z: np.concatenate([z.real, z.imag]))(
        (v[:D // 2] + 1j * v[D // 2:]) * np.exp(1j * t * np.array(freqs)))
    bias = lambda i, n, rows: W["model.layers.%d.self_attn.%s_proj.bias" % (i, n)][rows] if cfg.get("bias") else 0
    qkn = lambda i, n, v: norm(v, W["model.layers.%d.self_attn.%s_norm.weight" % (i, n)]) if cfg.get("qkn") else v
    total = 0.0
    for b in range(B):
        x = np.stack([W["model.embed_tokens.weight"][t] for t in inp[b].tolist()])
        for i in range(L):
            w = lambda n: W["model.layers.%d.%s.weight" % (i, n)]
            h, out = norm(x, w("input_layernorm")), np.zeros((T, C))
            for hd in range(H):
                g = hd * G // H
                qr, kr = slice(hd * D, (hd + 1) * D), slice(g * D, (g + 1) * D)
                qs = [rot(qkn(i, "q", w("self_attn.q_proj")[qr] @ h[t] + bias(i, "q", qr)), t) for t in range(T)]
                ks = [rot(qkn(i, "k", w("self_attn.k_proj")[kr] @ h[t] + bias(i, "k", kr)), t) for t in range(T)]
                vs = [w("self_attn.v_proj")[kr] @ h[t] + bias(i, "v", kr) for t in range(T)]
                for t in range(T):
                    sc = np.array([qs[t] @ ks[u] for u in range(t + 1)]) / math.sqrt(D)
                    p = np.exp(sc - sc.max())
                    o = sum(p[u] * vs[u] for u in range(t + 1)) / p.sum()
                    out[t] += w("self_attn.o_proj")[:, hd * D:(hd + 1) * D] @ o
            x = x + out
            h = norm(x, w("post_attention_layernorm"))
            if is_moe(cfg, i):  # token by token, selection by sorting, capacity by counting
                E, K, silu = cfg["E"], cfg["K"], (lambda v: v / (1 + np.exp(-v)))
                cap = math.ceil(cfg["cap"] * T * K / E) if cfg.get("cap") else T * K
                used, out, cnt, Pm, zs = [0] * E, np.zeros((T, C)), [0] * E, np.zeros(E), 0.0
                for t in range(T):
                    z = w("block_sparse_moe.gate") @ h[t]
                    pr = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
                    Pm += pr / T
                    zs += (z.max() + math.log(np.exp(z - z.max()).sum())) ** 2 / T
                    ch = sorted(range(E), key=lambda e: -pr[e])[:K]
                    for e in ch:
                        cnt[e] += 1
                        if used[e] >= cap:
                            continue
                        used[e] += 1
                        ex = lambda n: w("block_sparse_moe.experts.%d.%s" % (e, n))
                        out[t] += pr[e] / sum(pr[c] for c in ch) * (ex("w2") @ (silu(ex("w1") @ h[t]) * (ex("w3") @ h[t])))
                    if cfg.get("Fs"):
                        sx = lambda n: w("block_sparse_moe.shared_expert.%s_proj" % n)
                        out[t] += sx("down") @ (silu(sx("gate") @ h[t]) * (sx("up") @ h[t]))
                total += T * (cfg.get("aux", 0) * E * sum(cnt[e] / (T * K) * Pm[e] for e in range(E)) + cfg.get("zc", 0) * zs)
                x = x + out
                continue
            a = h @ w("mlp.gate_proj").T
            x = x + (a / (1 + np.exp(-a)) * (h @ w("mlp.up_proj").T)) @ w("mlp.down_proj").T
        lg = norm(x, W["model.norm.weight"]) @ W.get("lm_head.weight", W["model.embed_tokens.weight"]).T
        for t in range(T):
            m = lg[t].max()
            total += m + math.log(np.exp(lg[t] - m).sum()) - lg[t, int(tgt[b, t])]
    return total / (B * T)


def cmd_selftest(a):
    bad = []

    def expect(what, err, tol):
        print("selftest %-48s %.2e (tol %.0e) %s" % (what, err, tol, "ok" if err <= tol else "FAIL"))
        if not err <= tol:
            bad.append(what)

    gen = torch.Generator().manual_seed(7)
    moe = dict(E=4, K=2, Fe=10, freq=2, Fs=6, aux=0.1, zc=0.01, cap=0.0)
    for tag, cfg in (("moe+shared untied", dict(C=16, F=24, H=4, G=2, L=2, V=11, eps=1e-5, theta=10000.0, tied=False, **moe)),
                     ("moe capacity tied", dict(C=16, F=24, H=4, G=2, L=2, V=11, eps=1e-5, theta=10000.0, tied=True,
                                                **{**moe, "freq": 1, "Fs": 0, "cap": 0.75})),
                     ("gqa untied", dict(C=16, F=24, H=4, G=2, L=2, V=11, eps=1e-5, theta=10000.0, tied=False)),
                     ("mha tied", dict(C=12, F=20, H=3, G=3, L=1, V=9, eps=1e-5, theta=500.0, tied=True)),
                     ("mqa tied", dict(C=16, F=8, H=4, G=1, L=1, V=7, eps=1e-3, theta=10000.0, tied=True)),
                     ("qwen2 biases", dict(C=16, F=24, H=4, G=2, L=2, V=11, eps=1e-5, theta=10000.0, tied=False, bias=True)),
                     ("qwen3 norms, head 6", dict(C=16, F=24, H=4, G=2, L=2, V=11, eps=1e-6, theta=10000.0, tied=True,
                                                  D=6, qkn=True)),
                     ("llama3.1 rope scaling", dict(C=24, F=24, H=2, G=1, L=1, V=11, eps=1e-5, theta=10000.0, tied=False,
                                                    rope=(8.0, 1.0, 4.0, 8192))),
                     ("all variants", dict(C=16, F=24, H=4, G=2, L=1, V=11, eps=1e-5, theta=100.0, tied=False, D=6,
                                           bias=True, qkn=True, rope=(8.0, 1.0, 4.0, 32)))):
        P = random_model(cfg, gen)
        tok = torch.randint(0, cfg["V"], (2, 9), generator=gen)
        inp, tgt = tok[:, :8], tok[:, 1:]
        Pg = {k: v.clone().requires_grad_(True) for k, v in P.items()}
        ref = objective(Pg, cfg, inp, tgt, 1)[0]  # micro-batches of one sequence, as naive_loss
        ref.backward()
        expect("%s: loss vs naive loops" % tag, abs(ref.item() - naive_loss(P, cfg, inp, tgt)) / ref.item(), 1e-12)
        worst, hstep = 0.0, 1e-5
        for n in sorted(P):  # autograd vs central differences of the naive model along a random direction
            V = torch.randn(P[n].shape, generator=gen, dtype=DT)
            fd = [naive_loss({**P, n: P[n] + sgn * hstep * V}, cfg, inp, tgt) for sgn in (1, -1)]
            fd = (fd[0] - fd[1]) / (2 * hstep)
            an = (Pg[n].grad * V).sum().item()
            worst = max(worst, abs(fd - an) / max(abs(an), 1e-8))
        expect("%s: grads vs naive finite differences" % tag, worst, 1e-6)
    # files: safetensors, MMIDIDX (uint16 and int32) round trips
    import tempfile
    with tempfile.TemporaryDirectory() as td:
        t = {"a.weight": torch.randn(3, 5, dtype=DT), "b": torch.randn(7, dtype=DT)}
        for dt, tol in (("F64", 0.0), ("F32", 1e-7)):
            st_write(os.path.join(td, "x.safetensors"), t, dt, {"format": "pt"})
            r = st_read(os.path.join(td, "x.safetensors"))
            expect("safetensors %s round trip" % dt, max(rel(r[k], t[k]) for k in t) + (set(r) != set(t)), tol)
        for hi in (301, 70000):
            docs = [np.random.RandomState(hi).randint(0, hi, n) for n in (5, 1, 17, 3)]
            idx_write(os.path.join(td, "d"), docs)
            r = idx_read(os.path.join(td, "d"))
            expect("MMIDIDX round trip (vocab %d)" % hi, float(len(r) != 4 or any((x != y).any() for x, y in zip(r, docs))), 0)
    e = dict(lr=1e-2, min_lr=1e-3, lr_warmup_iters=3, train_iters=10)
    expect("lr schedule end points", abs(lr_at(1, e) - 1e-2 / 3) + abs(lr_at(3, e) - 1e-2) + abs(lr_at(10, e) - 1e-3)
           + abs(lr_at(6, e) - (1e-3 + 0.5 * 9e-3 * (1 + math.cos(math.pi * 3 / 7)))), 1e-15)
    print("selftest: %s" % ("FAIL: " + ", ".join(bad) if bad else "all ok"))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-case", help="random HF checkpoint, dataset and exp.yaml")
    m.add_argument("--out", required=True)
    m.add_argument("--name", help="exp_name (default: the folder name)")
    for k, v in (("hidden", 96), ("heads", 6), ("groups", 0), ("ffn", 260), ("layers", 2), ("vocab", 301),
                 ("seq", 37), ("seed", 1), ("docs", 20), ("micro-batch", 2), ("global-batch", 2), ("steps", 10),
                 ("warmup", 3), ("experts", 0), ("topk", 2), ("moe-ffn", 0), ("moe-freq", 1), ("shared", 0),
                 ("head-dim", 0)):
        m.add_argument("--" + k, type=int, default=v)
    for k, v in (("aux", 0.0), ("zloss", 0.0), ("capacity", 0.0)):
        m.add_argument("--" + k, type=float, default=v, help="MoE: moe_aux_loss_coeff, moe_z_loss_coeff, "
                       "moe_expert_capacity_factor")
    m.add_argument("--qkv-bias", action="store_true", help="Qwen2's q/k/v biases (add_qkv_bias)")
    m.add_argument("--qk-norm", action="store_true", help="Qwen3's q/k RMSNorm (qk_layernorm)")
    m.add_argument("--rope-factor", type=float, default=0.0, help="Llama 3.1's RoPE scaling factor (use_rope_scaling)")
    m.add_argument("--tied", dest="tied", action="store_true", default=False)
    m.add_argument("--untied", dest="tied", action="store_false")
    m.add_argument("--lr", type=float, default=1e-2)
    m.add_argument("--min-lr", type=float, default=1e-3)
    m.add_argument("--clip", type=float, default=None, help="clip_grad (default: the median unclipped grad norm)")
    m.add_argument("--eod-tokenizer", help="eod_mask_loss: a tokenizer.json whose EOD token ends every document "
                   "(HuggingFaceTokenizer); positions whose input is EOD leave the loss")
    m.add_argument("--tokenizer", default="ByteTokenizer", help="tokenizer_type (the ids are given: any type config validate knows)")
    r = sub.add_parser("reference", help="float64 reference run of a case")
    r.add_argument("--case", required=True)
    r.add_argument("--steps", type=int, default=0, help="default: train_iters of exp.yaml")
    r.add_argument("--out", help="default: CASE/ref.json")
    c = sub.add_parser("compare", help="check a primus run against the reference")
    c.add_argument("--case", required=True)
    c.add_argument("--primus-run", required=True, help="the run directory holding events.jsonl")
    c.add_argument("--grads", help="primus' step-1 gradients (default: CASE/primus_grads.safetensors)")
    c.add_argument("--ckpt", help="checkpoint folder (default: CASE/ckpt)")
    c.add_argument("--tol-loss", type=float, default=1e-5)
    c.add_argument("--tol-norm", type=float, default=1e-5, help="step-1 grad norm")
    c.add_argument("--tol-norm-later", type=float, default=1e-4, help="grad norms of steps 2..N")
    c.add_argument("--tol-grad", type=float, default=1e-4)
    c.add_argument("--tol-update", type=float, default=1e-3)
    sub.add_parser("selftest", help="check the reference against a naive implementation")
    a = ap.parse_args()
    if a.cmd == "compare":
        a.grads = a.grads or os.path.join(a.case, "primus_grads.safetensors")
        a.ckpt = a.ckpt or os.path.join(a.case, "ckpt")
    return {"make-case": cmd_make_case, "reference": cmd_reference, "compare": cmd_compare,
            "selftest": cmd_selftest}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
