#!/usr/bin/python3
"""sft_ref.py - float64 PyTorch oracle for primus' supervised fine-tuning
(`train posttrain`, docs/posttrain.md), beside llama_ref.py whose model
pieces, file readers and comparison it reuses.

What it adds is written from the documented contract, not from primus'
code: the default chat template over ByteTokenizer bytes and its loss mask,
truncation to seq_length + 1 tokens, greedy packing in file order (or one
example per padded sequence), attention restricted to each example (a
(B, T, T) mask of j <= i and seg[j] == seg[i]) with RoPE positions
restarting at 0 for each example, and the loss as the mean cross-entropy
over the global batch's loss tokens. Subcommands:
  make-case  random HF checkpoint + JSONL examples + a post_trainer exp.yaml
  reference  float64 step-1 loss/grads, then N AdamW steps -> ref.json, ref_*.safetensors
  compare    llama_ref.py's comparison of a primus run against the reference
  selftest   packed examples' losses equal each example run alone
"""
import argparse, json, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as L  # noqa: E402
import torch  # noqa: E402

DT = L.DT


# ---------------------------------------------------------------- data contract
def encode(ex):
    """The default template over bytes: (ids, mask), mask 1 on loss tokens."""
    if "messages" in ex:
        msgs = ex["messages"]
    else:
        msgs = [{"role": "user", "content": ex["prompt"]}, {"role": "assistant", "content": ex["response"]}]
    ids, mask = [], []

    def put(text, m):
        b = list(text.encode())
        ids.extend(b)
        mask.extend([m] * len(b))

    for msg in msgs:
        put("<|%s|>\n" % msg["role"], 0)
        if msg["role"] == "assistant":
            put(msg["content"] + "<|end|>", 1)
        else:
            put(msg["content"] + "\n", 0)
    return ids, mask


def sequences(path, S, packing):
    """The examples of the file packed (or padded) into lists of (ids, mask)."""
    exs = []
    for line in open(path):
        if not line.strip():
            continue
        ids, mask = encode(json.loads(line))
        ids, mask = ids[:S + 1], mask[:S + 1]
        if any(mask[1:]):
            exs.append((ids, mask))
    seqs, used = [], S
    for ids, mask in exs:
        need = len(ids) - 1
        if not packing or used + need > S:
            seqs.append([])
            used = 0
        seqs[-1].append((ids, mask))
        used += need
    return seqs


def sample(seq, S):
    """(tokens, targets, seg, pos) of one sequence: targets -1 off the loss,
    padding (token 0) one more segment."""
    tok, tgt, seg, pos = [], [], [], []
    for e, (ids, mask) in enumerate(seq):
        for j in range(len(ids) - 1):
            tok.append(ids[j])
            tgt.append(ids[j + 1] if mask[j + 1] else -1)
            seg.append(e)
            pos.append(j)
    n = len(tok)
    tok += [0] * (S - n)
    tgt += [-1] * (S - n)
    seg += [len(seq)] * (S - n)
    pos += list(range(S - n))
    return tok, tgt, seg, pos


def batches(seqs, S, G, steps):
    for s in range(steps):
        rows = [sample(seqs[k % len(seqs)], S) for k in range(s * G, s * G + G)]
        yield tuple(torch.tensor([r[i] for r in rows], dtype=torch.long) for i in range(4))


# ---------------------------------------------------------------- the model
def rope_at(x, pos, theta):  # x: (B, heads, T, D); pos: (B, T)
    D = x.shape[-1]
    inv = theta ** (-torch.arange(0, D, 2, dtype=DT) / D)
    ang = pos.to(DT)[:, None, :, None] * inv
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    rot = torch.cat([-x[..., D // 2:], x[..., :D // 2]], -1)
    return x * cos + rot * sin


def forward(P, cfg, tok, seg, pos):  # -> logits (B, T, V)
    C, H, G, eps = cfg["C"], cfg["H"], cfg["G"], cfg["eps"]
    D, (B, T) = C // H, tok.shape
    x = P["model.embed_tokens.weight"][tok]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = (causal[None] & (seg[:, :, None] == seg[:, None, :]))[:, None]  # (B, 1, T, T)
    for i in range(cfg["L"]):
        p = "model.layers.%d." % i
        h = L.rmsnorm(x, P[p + "input_layernorm.weight"], eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).view(B, T, G, D).transpose(1, 2)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(B, T, G, D).transpose(1, 2)
        q, k = rope_at(q, pos, cfg["theta"]), rope_at(k, pos, cfg["theta"])
        k, v = k.repeat_interleave(H // G, 1), v.repeat_interleave(H // G, 1)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v
        x = x + a.transpose(1, 2).reshape(B, T, C) @ P[p + "self_attn.o_proj.weight"].T
        h = L.rmsnorm(x, P[p + "post_attention_layernorm.weight"], eps)
        x = x + L.swiglu(h, P[p + "mlp.gate_proj.weight"], P[p + "mlp.up_proj.weight"], P[p + "mlp.down_proj.weight"])
    x = L.rmsnorm(x, P["model.norm.weight"], eps)
    return x @ P.get("lm_head.weight", P["model.embed_tokens.weight"]).T


def masked_loss(P, cfg, tok, tgt, seg, pos):
    """Mean cross-entropy over the loss tokens (targets >= 0) of the batch."""
    lg = forward(P, cfg, tok, seg, pos)
    ce = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), ignore_index=-1,
                                           reduction="sum")
    return ce / (tgt >= 0).sum()


def train(P0, cfg, seqs, e, steps, clip):
    P = {k: v.clone().to(DT).requires_grad_(True) for k, v in P0.items()}
    names = sorted(P)
    groups = [{"params": [P[k] for k in names if P[k].dim() >= 2], "weight_decay": e["weight_decay"]},
              {"params": [P[k] for k in names if P[k].dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=e["lr"], betas=(e["adam_beta1"], e["adam_beta2"]), eps=e["adam_eps"])
    hist, g1 = [], None
    for s, (tok, tgt, seg, pos) in enumerate(batches(seqs, e["seq_length"], e["global_batch_size"], steps), 1):
        opt.zero_grad(set_to_none=True)
        loss = masked_loss(P, cfg, tok, tgt, seg, pos)
        loss.backward()
        if s == 1:
            g1 = {k: P[k].grad.detach().clone() for k in names}
        params = [P[k] for k in names]
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm=clip)
        else:
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in params))
        lr = L.lr_at(s, e)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
        hist.append({"step": s, "loss": loss.item(), "grad_norm": norm.item(), "lr": lr,
                     "clipped": bool(clip > 0 and norm.item() > clip), "aux": 0.0, "z": 0.0,
                     "loss_tokens": int((tgt >= 0).sum())})
    return hist, g1, {k: v.detach() for k, v in P.items()}


# ---------------------------------------------------------------- subcommands
EXP = """work_group: oracle
user_name: test
exp_name: {name}
workspace: {d}/out
modules:
  post_trainer:
    framework: native
    config: post_trainer.yaml
    model: llama_tiny.yaml
    overrides:
      hidden_size: {C}
      num_layers: {L}
      num_attention_heads: {H}
      num_query_groups: {G}
      ffn_hidden_size: {F}
      vocab_size: 256
      make_vocab_size_divisible_by: 1
      seq_length: {S}
      max_position_embeddings: {S}
      untie_embeddings_and_output_weights: {untied}
      norm_epsilon: 1.0e-5
      rotary_base: 10000
      tokenizer_type: ByteTokenizer
      data_path: {d}/sft.jsonl
      split: "1,0,0"
      data_shuffle: false
      packing: {packing}
      chat_template: default
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
      finetune: true
      load: {d}/hf
      save: {d}/ckpt
      save_interval: {steps}
      eval_iters: 0
      log_interval: 1
"""


def words(gen, lo, hi):
    n = int(torch.randint(lo, hi + 1, (1,), generator=gen))
    return "".join(chr(97 + int(c)) if int(c) < 26 else " " for c in torch.randint(0, 30, (n,), generator=gen))


def cmd_make_case(a):
    d = os.path.abspath(a.out)
    os.makedirs(os.path.join(d, "hf"), exist_ok=True)
    cfg = dict(C=a.hidden, F=a.ffn, H=a.heads, G=a.groups or a.heads, L=a.layers, V=256, eps=1e-5,
               theta=10000.0, tied=a.tied, E=0)
    gen = torch.Generator().manual_seed(a.seed)
    P = L.random_model(cfg, gen)
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg["C"],
          "intermediate_size": cfg["F"], "num_attention_heads": cfg["H"], "num_key_value_heads": cfg["G"],
          "num_hidden_layers": cfg["L"], "vocab_size": 256, "rms_norm_eps": cfg["eps"],
          "rope_theta": cfg["theta"], "max_position_embeddings": a.seq, "tie_word_embeddings": cfg["tied"],
          "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "torch_dtype": "float32"}
    json.dump(hf, open(os.path.join(d, "hf", "config.json"), "w"), indent=2)
    L.st_write(os.path.join(d, "hf", "model.safetensors"), P, "F32", {"format": "pt"})
    # Short examples (several per sequence), some system messages, and a
    # few longer than the sequence (cut).
    with open(os.path.join(d, "sft.jsonl"), "w") as f:
        for i in range(a.examples):
            long = i % 7 == 3
            if i % 2:
                ex = {"prompt": words(gen, 1, 8), "response": words(gen, 1, 2 * a.seq if long else 10)}
            else:
                ex = {"messages": ([{"role": "system", "content": words(gen, 0, 4)}] if i % 4 == 0 else []) +
                      [{"role": "user", "content": words(gen, 1, 6)},
                       {"role": "assistant", "content": words(gen, 1, 2 * a.seq if long else 8)}]}
            f.write(json.dumps(ex) + "\n")
    e = dict(lr=a.lr, min_lr=a.min_lr, lr_warmup_iters=a.warmup, train_iters=a.steps, weight_decay=0.1,
             adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8, seq_length=a.seq, global_batch_size=a.global_batch)
    seqs = sequences(os.path.join(d, "sft.jsonl"), a.seq, a.packing)
    clip = a.clip
    if clip is None:  # the median grad norm of an unclipped run: some steps clip, some do not
        hist, _, _ = train(P, cfg, seqs, e, a.steps, 0.0)
        clip = float("%.4g" % sorted(h["grad_norm"] for h in hist)[a.steps // 2])
    open(os.path.join(d, "exp.yaml"), "w").write(EXP.format(
        name=a.name or os.path.basename(d), d=d, C=cfg["C"], L=cfg["L"], H=cfg["H"], G=cfg["G"], F=cfg["F"],
        S=a.seq, untied=str(not a.tied).lower(), packing=str(bool(a.packing)).lower(), mbs=a.micro_batch,
        gbs=a.global_batch, steps=a.steps, lr=a.lr, min_lr=a.min_lr, warmup=a.warmup, clip=clip))
    per = [len(q) for q in seqs]
    print("case %s: %d params, %d examples in %d sequences (%s per sequence), clip_grad %g" % (
        d, sum(v.numel() for v in P.values()), sum(per), len(seqs), "%d-%d" % (min(per), max(per)), clip))


def cmd_reference(a):
    d = os.path.abspath(a.case)
    e = L.read_exp(d)
    cfg = L.load_config(os.path.join(d, "hf"), e)
    P0 = L.st_read(os.path.join(d, "hf", "model.safetensors"))
    seqs = sequences(os.path.join(d, "sft.jsonl"), e["seq_length"], e["packing"] == "true")
    hist, g1, fin = train(P0, cfg, seqs, e, e["train_iters"], e["clip_grad"])
    L.st_write(os.path.join(d, "ref_grads.safetensors"), g1, "F64")
    L.st_write(os.path.join(d, "ref_final.safetensors"), fin, "F64")
    json.dump({"clip_grad": e["clip_grad"], "steps": hist}, open(os.path.join(d, "ref.json"), "w"), indent=1)
    for h in hist:
        print("ref step %2d loss %.10f over %d loss tokens, grad_norm %.8f lr %.6g%s" % (
            h["step"], h["loss"], h["loss_tokens"], h["grad_norm"], h["lr"], "  (clipped)" if h["clipped"] else ""))


def cmd_selftest(a):
    """The reference's own packing: each packed example's loss equals the
    example alone (its own sequence, positions from 0, padding after)."""
    gen = torch.Generator().manual_seed(5)
    cfg = dict(C=32, F=48, H=4, G=2, L=2, V=256, eps=1e-5, theta=10000.0, tied=True, E=0)
    P = L.random_model(cfg, gen)
    S = 96
    exs = [encode({"prompt": words(gen, 1, 6), "response": words(gen, 1, 6)}) for _ in range(3)]
    packed = sample(exs, S)
    worst = 0.0
    for e, ex in enumerate(exs):
        tok, tgt, seg, pos = (torch.tensor([v]) for v in packed)
        tgt = torch.where(seg == e, tgt, torch.full_like(tgt, -1))
        lp = masked_loss(P, cfg, tok, tgt, seg, pos).item()
        alone = (torch.tensor([v]) for v in sample([ex], S))
        la = masked_loss(P, cfg, *alone).item()
        worst = max(worst, abs(lp - la) / la)
    print("selftest: packed vs alone, worst relative loss difference %.3e" % worst)
    return 0 if worst < 1e-12 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-case", help="random HF checkpoint + JSONL examples + exp.yaml")
    m.add_argument("--out", required=True)
    m.add_argument("--name", help="exp_name (default: the folder name)")
    for k, v in (("hidden", 64), ("heads", 4), ("groups", 0), ("ffn", 96), ("layers", 2), ("seq", 64),
                 ("seed", 1), ("examples", 24), ("micro-batch", 2), ("global-batch", 4), ("steps", 6),
                 ("warmup", 2), ("packing", 1)):
        m.add_argument("--" + k, type=int, default=v)
    m.add_argument("--tied", dest="tied", action="store_true", default=False)
    m.add_argument("--untied", dest="tied", action="store_false")
    m.add_argument("--lr", type=float, default=1e-2)
    m.add_argument("--min-lr", type=float, default=1e-3)
    m.add_argument("--clip", type=float, default=None, help="clip_grad (default: the median unclipped grad norm)")
    r = sub.add_parser("reference", help="float64 reference run of a case")
    r.add_argument("--case", required=True)
    sub.add_parser("selftest", help="packed examples against the examples alone")
    a = ap.parse_args()
    return {"make-case": cmd_make_case, "reference": cmd_reference, "selftest": cmd_selftest}[a.cmd](a) or 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        sys.exit(L.main())  # llama_ref.py's checks, tolerances and report
    sys.exit(main())
