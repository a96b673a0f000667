#!/usr/bin/env python3
"""gen_fixtures.py - tiny Qwen3.5-MoE reference fixtures from Hugging Face transformers.

Run on the GPU machine (torch, transformers 5.x, peft, tokenizers, safetensors):

    python3 tests/tools/gen_fixtures.py OUT_DIR

It writes, under OUT_DIR (copied into tests/fixtures/ by hand afterwards; see
tests/fixtures/README.md for what each file is):

- a byte-level BPE tokenizer trained with the `tokenizers` library (Qwen3.5
  split regex with \\p{M}, NFC, ByteLevel, the 33 Qwen added tokens), whose
  size is the tiny model's vocab_size;
- one set of random weights (rounded to bf16 once, so f32 and bf16 files hold
  the same values), saved as four checkpoints:
    qwen35moe-tiny               multimodal, bf16, fused 3-D experts (as released)
    qwen35moe-tiny-mm-f32        multimodal, f32, per-expert (save_pretrained)
    qwen35moe-tiny-text-f32      text-only, f32, per-expert, sharded + index (save_pretrained)
    qwen35moe-tiny-text-bf16     text-only, bf16, fused 3-D experts
- ref_logits.safetensors: f32 logits (TF32 off, use_cache=False: HF's chunked
  DeltaNet prefill) for several token sequences, one longer than 64 tokens;
- ref_generate.json: 24-token greedy continuations from model.generate (the
  cached decode path), with the smallest top-2 logit margin seen;
- lora-tiny/: a PEFT LoRA adapter (random A and B), logits with it on and off,
  merge_and_unload() results for the targeted tensors in f32 and bf16, and the
  sanity diffs for the 5 built-in probe prompts;
- nvfp4_ref.safetensors: torch dequantization of random NVFP4 tensors in both
  scale conventions (compressed-tensors and ModelOpt).

Everything is seeded; expected values come from the reference libraries only.
"""
import json
import math
import os
import shutil
import sys
import unicodedata

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Qwen3.5 pre-tokenizer split regex (docs/reference qwen35moe-architecture.md §5.1)
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# (content, special) in id order, as in Qwen3.5's tokenizer (§5.1). Like Qwen3,
# the tool/think markers are added tokens that are not "special".
ADDED = [
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False), ("<|audio_start|>", True), ("<|audio_end|>", True),
    ("<tts_pad>", True), ("<tts_text_bos>", True), ("<tts_text_eod>", True),
    ("<tts_text_bos_single>", True), ("<|audio_pad|>", True),
]
BPE_VOCAB = 480

# The 5 built-in bilingual probe prompts of `lynn sanity` (SPEC §4); src/ must
# use the same strings.
SANITY_PROMPTS = [
    "Explain in two sentences why the sky is blue.",
    "用两句话解释为什么天空是蓝色的。",
    "Write a Python function that returns the n-th Fibonacci number.",
    "请列出三个提高睡眠质量的建议。",
    "What is 17 times 23? Answer with the number only.",
]

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "in_proj_qkv", "in_proj_z",
                "out_proj", "gate_proj", "up_proj", "down_proj"]


def train_tokenizer(out):
    lines = open(os.path.join(HERE, "tiny_tok_corpus.txt"), encoding="utf-8").read().splitlines()
    lines.append("Combining: e\u0301 a\u0308 o\u0302 n\u0303 (NFC composes these).")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(lines * 4, trainer=trainer)
    for content, special in ADDED:
        at = AddedToken(content, special=special, normalized=False, single_word=False,
                        lstrip=False, rstrip=False)
        if special:
            tok.add_special_tokens([at])
        else:
            tok.add_tokens([at])
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    ids = {c: tok.token_to_id(c) for c, _ in ADDED}
    return tok, vocab_size, ids


def tokenizer_config(ids):
    dec = {}
    for content, special in ADDED:
        dec[str(ids[content])] = {"content": content, "lstrip": False, "normalized": False,
                                  "rstrip": False, "single_word": False, "special": special}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": dec,
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 262144,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def text_config_dict(vocab_size, ids):
    return dict(
        vocab_size=vocab_size, hidden_size=64, num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, rms_norm_eps=1e-6, tie_word_embeddings=False,
        max_position_embeddings=4096, hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                         "mrope_interleaved": True},
        eos_token_id=ids["<|endoftext|>"], pad_token_id=ids["<|endoftext|>"], bos_token_id=None,
    )


def redraw(model, gen):
    """Re-draw every parameter (default init leaves norms at 0 and outputs flat)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = p.shape
            if name.endswith("A_log"):
                v = torch.log(torch.empty(shape).uniform_(1.0, 16.0, generator=gen))
            elif name.endswith("dt_bias"):
                v = torch.empty(shape).uniform_(0.5, 1.5, generator=gen)
            elif name.endswith("linear_attn.norm.weight"):
                v = 1.0 + 0.2 * torch.randn(shape, generator=gen)
            elif "norm" in name and p.dim() == 1:
                v = 0.2 * torch.randn(shape, generator=gen)  # zero-centred: scale is 1 + w
            elif "conv1d" in name:
                v = 0.4 * torch.randn(shape, generator=gen)
            elif name.endswith("embed_tokens.weight"):
                v = torch.randn(shape, generator=gen)
            elif name.endswith("mlp.gate.weight"):
                v = 3.0 * torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
            elif p.dim() >= 2:
                v = torch.randn(shape, generator=gen) / math.sqrt(shape[-1])
                if name.endswith("lm_head.weight"):
                    v = v * 3.0
            else:
                v = 0.1 * torch.randn(shape, generator=gen)
            # one rounding to bf16, so the f32 and bf16 checkpoints agree exactly
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def copy_text_into_mm(text_model, mm_model):
    src = text_model.state_dict()
    dst = mm_model.state_dict()
    n = 0
    with torch.no_grad():
        for k, v in src.items():
            if k.startswith("model."):
                mk = "model.language_model." + k[len("model."):]
            else:
                mk = k
            dst[mk].copy_(v)
            n += 1
    return n


def save_fused(model, d, dtype, cfg_src_dir):
    os.makedirs(d, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(cfg_src_dir, "config.json")))
    if "text_config" in cfg:
        cfg["text_config"]["dtype"] = "bfloat16" if dtype == torch.bfloat16 else "float32"
    cfg["dtype"] = "bfloat16" if dtype == torch.bfloat16 else "float32"
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")


def render_chat(template_text, messages, add_generation_prompt=True, enable_thinking=False, tools=None):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    t = env.from_string(template_text)
    kw = dict(messages=messages, add_generation_prompt=add_generation_prompt,
              enable_thinking=enable_thinking)
    if tools is not None:
        kw["tools"] = tools
    return t.render(**kw)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/lynn-fixtures"
    os.makedirs(out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = "cuda" if torch.cuda.is_available() else "cpu"

    import transformers
    from transformers import (Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM,
                              Qwen3_5MoeForConditionalGeneration, Qwen3_5MoeTextConfig)

    info = {"transformers": transformers.__version__, "torch": torch.__version__, "device": dev}

    # ---- tokenizer ----
    tok_dir = os.path.join(out, "_tok")
    os.makedirs(tok_dir, exist_ok=True)
    tok, vocab_size, ids = train_tokenizer(tok_dir)
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as fh:
        json.dump(tokenizer_config(ids), fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    tmpl_path = os.path.join(REPO, "tests", "fixtures", "chat_template_qwen35.jinja")
    template_text = open(tmpl_path, encoding="utf-8").read()
    shutil.copy(tmpl_path, os.path.join(tok_dir, "chat_template.jinja"))
    info["vocab_size"] = vocab_size

    # ---- one set of weights ----
    gen = torch.Generator().manual_seed(20261130)
    tcfg = text_config_dict(vocab_size, ids)
    text_conf = Qwen3_5MoeTextConfig(**tcfg)
    text_conf._attn_implementation = "eager"
    text_model = Qwen3_5MoeForCausalLM(text_conf).float()
    redraw(text_model, gen)
    text_model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    text_model.generation_config.pad_token_id = ids["<|endoftext|>"]
    text_model.generation_config.bos_token_id = None
    text_model.generation_config.do_sample = False
    gen_cfg = {"bos_token_id": None, "do_sample": False,
               "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
               "pad_token_id": ids["<|endoftext|>"], "temperature": 1.0, "top_k": 20,
               "top_p": 0.95, "transformers_version": transformers.__version__}

    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                  temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=64,
                  num_position_embeddings=16, in_channels=3)
    mm_conf = Qwen3_5MoeConfig(text_config=tcfg, vision_config=vision,
                               image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                               vision_start_token_id=ids["<|vision_start|>"],
                               vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)
    mm_conf._attn_implementation = "eager"
    mm_model = Qwen3_5MoeForConditionalGeneration(mm_conf).float()
    redraw(mm_model, torch.Generator().manual_seed(7))  # vision tower gets its own random weights
    info["text_tensors_copied"] = copy_text_into_mm(text_model, mm_model)
    mm_model.generation_config = text_model.generation_config

    # ---- checkpoints ----
    d_text32 = os.path.join(out, "qwen35moe-tiny-text-f32")
    text_model.save_pretrained(d_text32, max_shard_size="300KB")
    d_mm32 = os.path.join(out, "qwen35moe-tiny-mm-f32")
    mm_model.save_pretrained(d_mm32)
    d_mm16 = os.path.join(out, "qwen35moe-tiny")
    save_fused(mm_model, d_mm16, torch.bfloat16, d_mm32)
    d_text16 = os.path.join(out, "qwen35moe-tiny-text-bf16")
    save_fused(text_model, d_text16, torch.bfloat16, d_text32)
    for d in (d_text32, d_mm32, d_mm16, d_text16):
        for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            shutil.copy(os.path.join(tok_dir, f), os.path.join(d, f))
        with open(os.path.join(d, "generation_config.json"), "w") as fh:
            json.dump(gen_cfg, fh, indent=2)
            fh.write("\n")
    info["state_dict_keys_sample"] = {
        "mm_module": [k for k in mm_model.state_dict() if "layers.0.mlp" in k][:6],
    }

    # ---- reference logits ----
    text_model.to(dev).eval()
    mm_model.to(dev).eval()
    g2 = torch.Generator().manual_seed(99)
    chat = render_chat(template_text, [{"role": "user", "content": SANITY_PROMPTS[0]}])
    chat_ids = tok.encode(chat, add_special_tokens=False).ids
    long_text = open(os.path.join(HERE, "tiny_tok_corpus.txt"), encoding="utf-8").read()[:600]
    long_ids = tok.encode(long_text, add_special_tokens=False).ids[:90]
    assert len(long_ids) > 64, len(long_ids)
    seqs = {
        "one": [ids["<|im_start|>"]],
        "short": torch.randint(0, vocab_size - len(ADDED), (7,), generator=g2).tolist(),
        "chat": chat_ids,
        "long": long_ids,
    }
    tensors = {}
    with torch.no_grad():
        for name, s in seqs.items():
            x = torch.tensor([s], device=dev)
            lt = text_model(input_ids=x, use_cache=False).logits[0].float().cpu()
            lm = mm_model(input_ids=x, use_cache=False).logits[0].float().cpu()
            info[f"mm_vs_text_maxdiff_{name}"] = float((lt - lm).abs().max())
            tensors[f"ids.{name}"] = torch.tensor(s, dtype=torch.int32)
            tensors[f"logits.{name}"] = lt.contiguous()
            # HF's cached path: prefill all but the last token, then decode it
            if len(s) > 1:
                o = text_model(input_ids=x[:, :-1], use_cache=True)
                o2 = text_model(input_ids=x[:, -1:], past_key_values=o.past_key_values, use_cache=True)
                info[f"cached_last_vs_full_maxdiff_{name}"] = float(
                    (o2.logits[0, -1].float().cpu() - lt[-1]).abs().max())
    save_file(tensors, os.path.join(out, "ref_logits.safetensors"))

    sections = [("generate", lambda: greedy(out, text_model, seqs, ids, dev)),
                ("lora", lambda: lora(out, text_conf, text_model, seqs, tok, template_text, dev, info)),
                ("nvfp4", lambda: nvfp4_ref(out))]
    for name, fn in sections:
        try:
            fn()
            info[f"section_{name}"] = "ok"
        except Exception:  # keep the other fixtures; report the failure
            import traceback
            info[f"section_{name}"] = traceback.format_exc()

    shutil.rmtree(tok_dir)
    with open(os.path.join(out, "gen_info.json"), "w") as fh:
        json.dump(info, fh, indent=1)
        fh.write("\n")
    print(json.dumps(info, indent=1))


def greedy(out, text_model, seqs, ids, dev):
    gens = []
    with torch.no_grad():
        for name in ("one", "chat", "long"):
            x = torch.tensor([seqs[name]], device=dev)
            r = text_model.generate(x, max_new_tokens=24, do_sample=False, output_scores=True,
                                    return_dict_in_generate=True, eos_token_id=None,
                                    pad_token_id=ids["<|endoftext|>"])
            new = r.sequences[0, x.shape[1]:].tolist()
            margins = []
            for sc in r.scores:
                top = torch.topk(sc[0].float(), 2).values
                margins.append(float(top[0] - top[1]))
            gens.append({"name": name, "prompt_ids": seqs[name], "generated_ids": new,
                         "min_top2_margin": min(margins)})
    with open(os.path.join(out, "ref_generate.json"), "w") as fh:
        json.dump({"max_new_tokens": 24, "cases": gens}, fh, indent=1)
        fh.write("\n")



def lora(out, text_conf, text_model, seqs, tok, template_text, dev, info):
    from transformers import Qwen3_5MoeForCausalLM
    from peft import LoraConfig, get_peft_model
    lora_dir = os.path.join(out, "lora-tiny")
    base = Qwen3_5MoeForCausalLM(text_conf).float()
    base.load_state_dict(text_model.state_dict())
    lcfg = LoraConfig(r=4, lora_alpha=8, target_modules=LORA_TARGETS, lora_dropout=0.0,
                      bias="none", rank_pattern={"out_proj": 2}, alpha_pattern={"out_proj": 4})
    pm = get_peft_model(base, lcfg)
    gl = torch.Generator().manual_seed(4242)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                p.copy_((0.3 * torch.randn(p.shape, generator=gl)).to(torch.bfloat16).float())
    pm.save_pretrained(lora_dir)
    pm.to(dev).eval()
    lt = {}
    with torch.no_grad():
        for name, s in seqs.items():
            x = torch.tensor([s], device=dev)
            lt[f"logits_on.{name}"] = pm(input_ids=x, use_cache=False).logits[0].float().cpu().contiguous()
            with pm.disable_adapter():
                lt[f"logits_off.{name}"] = pm(input_ids=x, use_cache=False).logits[0].float().cpu().contiguous()
            lt[f"ids.{name}"] = torch.tensor(s, dtype=torch.int32)
        # sanity: last-position mean |on - off| for the built-in probe prompts
        sanity = []
        for i, ptxt in enumerate(SANITY_PROMPTS):
            rendered = render_chat(template_text, [{"role": "user", "content": ptxt}])
            pid = tok.encode(rendered, add_special_tokens=False).ids
            x = torch.tensor([pid], device=dev)
            on = pm(input_ids=x, use_cache=False).logits[0, -1].float()
            with pm.disable_adapter():
                off = pm(input_ids=x, use_cache=False).logits[0, -1].float()
            sanity.append({"idx": i, "prompt": ptxt, "rendered": rendered, "ids": pid,
                           "diff": float((on - off).abs().mean())})
    save_file(lt, os.path.join(out, "lora_logits.safetensors"))
    with open(os.path.join(out, "lora_sanity.json"), "w") as fh:
        json.dump({"items": sanity}, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    # merge_and_unload in f32 and in bf16: keep the tensors it changed
    pm = pm.cpu()
    before = {k: v.clone() for k, v in text_model.cpu().state_dict().items()}
    merged = pm.merge_and_unload()
    msd = merged.state_dict()
    changed = {k: msd[k].float().contiguous() for k in msd if k in before and not torch.equal(msd[k], before[k])}
    save_file(changed, os.path.join(out, "lora_merged_f32.safetensors"))
    base16 = Qwen3_5MoeForCausalLM(text_conf).to(torch.bfloat16)
    base16.load_state_dict({k: v.to(torch.bfloat16) for k, v in before.items()})
    pm16 = get_peft_model(base16, lcfg)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file
    set_peft_model_state_dict(pm16, {k: v.to(torch.bfloat16) for k, v in
                                     load_file(os.path.join(lora_dir, "adapter_model.safetensors")).items()})
    m16 = pm16.merge_and_unload().state_dict()
    save_file({k: m16[k].contiguous() for k in changed}, os.path.join(out, "lora_merged_bf16.safetensors"))
    info["lora_changed_tensors"] = sorted(changed)[:8] + ["..."]
    info["lora_n_changed"] = len(changed)
    with torch.no_grad():
        x = torch.tensor([seqs["long"]])
        info["merged_vs_adapter_on_maxdiff_long"] = float(
            (merged(input_ids=x, use_cache=False).logits[0].float() - lt["logits_on.long"]).abs().max())



def nvfp4_ref(out):
    g3 = torch.Generator().manual_seed(5)
    N, K = 24, 64
    packed = torch.randint(0, 256, (N, K // 2), dtype=torch.uint8, generator=g3)
    # positive, finite E4M3 block scales (bit patterns 0x01..0x7e)
    scale_bits = torch.randint(1, 0x7F, (N, K // 16), dtype=torch.uint8, generator=g3)
    scales = scale_bits.view(torch.float8_e4m3fn)
    e2m1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    lo = e2m1[(packed & 0xF).long()]
    hi = e2m1[(packed >> 4).long()]
    q = torch.stack([lo, hi], dim=-1).reshape(N, K)  # low nibble = even column
    s = scales.float().repeat_interleave(16, dim=1)
    gscale = torch.tensor([1234.5], dtype=torch.float32)
    scale2 = torch.tensor(1.0 / 1234.5, dtype=torch.float32)
    save_file({"weight_packed": packed, "weight_scale": scales, "weight_global_scale": gscale,
               "weight_scale_2": scale2,
               "dequant_ct": (q * s / gscale).float().contiguous(),
               "dequant_modelopt": (q * s * scale2).float().contiguous()},
              os.path.join(out, "nvfp4_ref.safetensors"))



if __name__ == "__main__":
    main()
