#!/usr/bin/python3
"""torch_llama.py - PyTorch fp32 Llama training-speed peer for primus.

The architecture of Hugging Face's LlamaForCausalLM (RMSNorm, rotate-half
RoPE, grouped-query attention, SwiGLU MLP, tied or untied head, no biases),
trained the way primus' native trainer does it: AdamW (betas 0.9/0.95, eps
1e-8, weight decay on matrices only), clip_grad_norm_, linear warm-up then
cosine learning rate, on random tokens (like primus' mock_data) or on the
bytes of a text file. Speed only: no checkpoints, no evaluation.

Prints the mean step time over the steps after the first --warmup (default
2), tokens/s, achieved TFLOP/s with primus' formula
(prm_llama_flops_per_token: 6 * matmul params + 12 * L * hidden * T per
token) and the peak RSS (ru_maxrss), and a final machine-readable line:
  RESULT ms_per_step=... tokens_per_s=... tflops=... peak_rss_kib=... params=...

Run it with Debian's PyTorch 1.13: /usr/bin/python3 bench/torch_llama.py ...
Threads come from --threads (default: OMP_NUM_THREADS, else 1).

On a GPU (bench/gpu_race.sh): --device cuda trains there (the step timed
after torch.cuda.synchronize), --bf16 under torch.autocast(bfloat16) with
fp32 master weights (what primus' bf16: true does), --compile through
torch.compile; the RESULT line then adds peak_device_bytes
(torch.cuda.max_memory_allocated).
"""
import argparse, math, os, resource, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, c, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.H, self.G, self.D = a.heads, a.kv_heads, a.hidden // a.heads
        self.q_proj = nn.Linear(a.hidden, self.H * self.D, bias=False)
        self.k_proj = nn.Linear(a.hidden, self.G * self.D, bias=False)
        self.v_proj = nn.Linear(a.hidden, self.G * self.D, bias=False)
        self.o_proj = nn.Linear(self.H * self.D, a.hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        H, G, D = self.H, self.G, self.D
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)
        k = self.k_proj(x).view(B, T, G, D).transpose(1, 2)
        v = self.v_proj(x).view(B, T, G, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if G != H:  # HF repeat_kv: query head h reads group h // (H / G)
            r = H // G
            k = k[:, :, None].expand(B, G, r, T, D).reshape(B, H, T, D)
            v = v[:, :, None].expand(B, G, r, T, D).reshape(B, H, T, D)
        if hasattr(F, "scaled_dot_product_attention"):  # torch >= 2.0
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: manual causal softmax attention (T x T scores)
            s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D)) + mask
            o = torch.matmul(torch.softmax(s, dim=-1), v)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * D))


class MLP(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gate_proj = nn.Linear(a.hidden, a.ffn, bias=False)
        self.up_proj = nn.Linear(a.hidden, a.ffn, bias=False)
        self.down_proj = nn.Linear(a.ffn, a.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm = RMSNorm(a.hidden, a.eps)
        self.self_attn = Attention(a)
        self.post_attention_layernorm = RMSNorm(a.hidden, a.eps)
        self.mlp = MLP(a)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, a.eps)
        self.lm_head = None if a.tied else nn.Linear(a.hidden, a.vocab, bias=False)
        for n, p in self.named_parameters():  # primus: normal(0, init_method_std), norms 1
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, a.init_std)
        D = a.hidden // a.heads
        inv = a.rope_theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        ang = torch.arange(a.seq, dtype=torch.float64)[:, None] * inv[None, :]
        self.register_buffer("cos", torch.cat([ang.cos()] * 2, -1).float(), persistent=False)
        self.register_buffer("sin", torch.cat([ang.sin()] * 2, -1).float(), persistent=False)
        mask = torch.full((a.seq, a.seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, tok):
        x = self.embed_tokens(tok)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        x = self.norm(x)
        w = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(x, w)


def flops_per_token(a):
    """primus' prm_llama_flops_per_token: 6 * matmul params + 12 * L * C * T."""
    D = a.hidden // a.heads
    layer = a.hidden * (a.heads * D) * 2 + a.hidden * (a.kv_heads * D) * 2 + 3 * a.hidden * a.ffn
    matmul = a.layers * layer + a.vocab * a.hidden
    return 6.0 * matmul + 12.0 * a.layers * a.hidden * a.seq


def lr_at(s, a):  # s: 1-based step; primus' warm-up + cosine schedule
    if s <= a.warmup_iters:
        return a.lr * s / a.warmup_iters
    return a.min_lr + 0.5 * (a.lr - a.min_lr) * (1 + math.cos(math.pi * min(1.0, (s - a.warmup_iters) / max(1, a.steps - a.warmup_iters))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v in (("hidden", 128), ("layers", 4), ("heads", 4), ("kv-heads", 2), ("ffn", 352), ("vocab", 256),
                 ("seq", 128), ("batch", 16), ("steps", 12), ("warmup", 2), ("warmup-iters", 100),
                 ("threads", 0), ("seed", 1234)):
        ap.add_argument("--" + k, type=int, default=v)
    for k, v in (("lr", 1e-3), ("min-lr", 1e-4), ("weight-decay", 0.1), ("clip", 1.0), ("eps", 1e-5),
                 ("rope-theta", 10000.0), ("init-std", 0.02)):
        ap.add_argument("--" + k, type=float, default=v)
    ap.add_argument("--untied", dest="tied", action="store_false", default=True)
    ap.add_argument("--data", help="train on the bytes of this text file (vocab must be >= 256) instead of random tokens")
    ap.add_argument("--foreach", action="store_true", help="AdamW(foreach=True) (multi-tensor update)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--bf16", action="store_true", help="autocast to bfloat16 (fp32 master weights)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (torch >= 2)")
    ap.add_argument("--tf32", action="store_true", help="TF32 tensor cores in fp32 matmuls (CUDA; off by default)")
    a = ap.parse_args()
    assert a.hidden % a.heads == 0 and a.heads % a.kv_heads == 0 and (a.hidden // a.heads) % 2 == 0
    assert a.steps > a.warmup, "need at least one timed step"

    threads = a.threads or int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    torch.set_num_threads(threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    model = Llama(a).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    fwd = torch.compile(model) if a.compile else model
    cuda = dev.type == "cuda"
    if cuda:
        # primus' fp32 is fp32 unless asked (its tf32: false by default)
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": a.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, foreach=a.foreach or None)

    S, B = a.seq, a.batch
    if a.data:
        raw = torch.frombuffer(bytearray(open(a.data, "rb").read()), dtype=torch.uint8).long()
        assert a.vocab >= 256 and raw.numel() > S + 1

        def batch(step):  # consecutive sequences, in order, wrapping
            idx = ((step * B + torch.arange(B))[:, None] * S + torch.arange(S + 1)[None, :]) % raw.numel()
            seq = raw[idx].to(dev)
            return seq[:, :-1], seq[:, 1:]
    else:
        g = torch.Generator().manual_seed(a.seed)

        def batch(step):
            seq = torch.randint(0, a.vocab, (B, S + 1), generator=g).to(dev)
            return seq[:, :-1], seq[:, 1:]

    fpt = flops_per_token(a)
    print("torch %s, %d threads (OMP_NUM_THREADS=%s OMP_WAIT_POLICY=%s OPENBLAS_CORETYPE=%s), %d parameters, "
          "hidden %d layers %d heads %d/%d kv ffn %d vocab %d %s head, batch %d x seq %d, attention: %s"
          % (torch.__version__, torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"),
             os.environ.get("OMP_WAIT_POLICY"), os.environ.get("OPENBLAS_CORETYPE"), nparams, a.hidden,
             a.layers, a.heads, a.kv_heads, a.ffn, a.vocab, "tied" if a.tied else "untied", B, S,
             "sdpa" if hasattr(F, "scaled_dot_product_attention") else "manual softmax"), flush=True)
    times = []
    for s in range(1, a.steps + 1):
        inp, tgt = batch(s - 1)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=a.bf16):
            logits = fwd(inp)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), tgt.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, a.clip)
        for grp in opt.param_groups:
            grp["lr"] = lr_at(s, a)
        opt.step()
        lv = loss.item()
        if cuda:
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        times.append(ms)
        print("step %d/%d loss %.4f grad_norm %.3f %.1f ms" % (s, a.steps, lv, norm.item(), ms), flush=True)
    timed = times[a.warmup:]
    ms = sum(timed) / len(timed)
    tps = B * S / (ms / 1e3)
    tflops = fpt * tps / 1e12
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print("mean %.1f ms/step over steps %d-%d (min %.1f, max %.1f), %.0f tokens/s, %.4f TFLOP/s, peak RSS %.1f MiB"
          % (ms, a.warmup + 1, a.steps, min(timed), max(timed), tps, tflops, rss / 1024))
    dev_peak = torch.cuda.max_memory_allocated() if cuda else 0
    print("RESULT ms_per_step=%.3f tokens_per_s=%.1f tflops=%.5f peak_rss_kib=%d params=%d flops_per_token=%.0f"
          " peak_device_bytes=%d" % (ms, tps, tflops, rss, nparams, fpt, dev_peak))


if __name__ == "__main__":
    sys.exit(main())
