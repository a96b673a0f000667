#!/usr/bin/env python3
"""gen_penalty_fixtures.py - greedy continuations of the tiny model with repetition,
presence and frequency penalties and a logit bias, from Hugging Face transformers'
generate.

Run on the GPU machine (torch, transformers 5.x), from the repository root:

    python3 tests/tools/gen_penalty_fixtures.py OUT_DIR

It writes OUT_DIR/ref_generate_penalties.json (copied into tests/fixtures/ by
hand): for the one/chat/long prompts of ref_generate.json and several penalty
and bias settings, the 24 greedy tokens model.generate picks (prefill, then the
cached decode), and the smallest top-2 margin of the scores it picked from.

- repetition_penalty is transformers' own RepetitionPenaltyLogitsProcessor
  (generate's `repetition_penalty`): every token of the prompt and of the
  output so far, a logit x > 0 becomes x / r, otherwise x * r.
- presence and frequency penalties are not in transformers. They are added
  here as a logits processor written from OpenAI's definition (API reference,
  "Parameter details": mu[j] -= c[j] * frequency_penalty
  + (c[j] > 0) * presence_penalty, c[j] the times token j was generated so far;
  the prompt does not count), after generate's own processors, so a case with
  both applies the repetition penalty first, as vLLM does.
- logit_bias (OpenAI's: a number added to a token's logit) is transformers'
  sequence_bias with one-token sequences (SequenceBiasLogitsProcessor): -100 on
  the token the unpenalized continuation uses most, +4 on token 300. A bias
  case has no repetition penalty, so the order of the two (vLLM: bias first)
  does not matter.
"""
import json
import os
import sys

import torch
from transformers import LogitsProcessor, LogitsProcessorList, Qwen3_5MoeForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MAX_NEW = 24

# (repetition, presence, frequency, bias)
SETTINGS = [
    (1.3, 0.0, 0.0, False),
    (0.7, 0.0, 0.0, False),
    (1.0, 1.5, 0.0, False),
    (1.0, 0.0, 0.8, False),
    (1.0, -1.0, 0.0, False),
    (1.2, 1.0, 0.5, False),
    (1.0, 0.0, 0.0, True),
    (1.0, 1.0, 0.0, True),
]
BOOST = 300


class OpenAIPenalties(LogitsProcessor):
    def __init__(self, n_prompt, presence, frequency):
        self.n_prompt, self.presence, self.frequency = n_prompt, presence, frequency

    def __call__(self, input_ids, scores):
        out = input_ids[:, self.n_prompt:]
        counts = torch.zeros_like(scores)
        if out.shape[1]:
            counts.scatter_add_(1, out, torch.ones_like(out, dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "/tmp/lynn-penalty-fixtures"
    os.makedirs(out_dir, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    fx = os.path.join(REPO, "tests", "fixtures")
    model = Qwen3_5MoeForCausalLM.from_pretrained(os.path.join(fx, "qwen35moe-tiny-text-f32"),
                                                  attn_implementation="eager",
                                                  dtype=torch.float32).to(dev).eval()
    plain = {c["name"]: c for c in json.load(open(os.path.join(fx, "ref_generate.json")))["cases"]}
    pad = model.generation_config.pad_token_id
    cases = []
    with torch.no_grad():
        for name, ref in plain.items():
            x = torch.tensor([ref["prompt_ids"]], device=dev)
            plain_ids = ref["generated_ids"]
            ban = max(sorted(set(plain_ids)), key=plain_ids.count)
            for rep, pres, freq, with_bias in SETTINGS:
                procs = LogitsProcessorList()
                if pres or freq:
                    procs.append(OpenAIPenalties(x.shape[1], pres, freq))
                bias = [[ban, -100.0], [BOOST, 4.0]] if with_bias else []
                extra = {"sequence_bias": [[[i], b] for i, b in bias]} if bias else {}
                r = model.generate(x, max_new_tokens=MAX_NEW, do_sample=False, repetition_penalty=rep,
                                   logits_processor=procs, output_scores=True,
                                   return_dict_in_generate=True, eos_token_id=None, pad_token_id=pad,
                                   **extra)
                new = r.sequences[0, x.shape[1]:].tolist()
                margins = [float(t[0] - t[1]) for t in
                           (torch.topk(sc[0].float(), 2).values for sc in r.scores)]
                cases.append({"name": name, "repetition_penalty": rep, "presence_penalty": pres,
                              "frequency_penalty": freq, "logit_bias": bias, "prompt_ids": ref["prompt_ids"],
                              "generated_ids": new, "min_top2_margin": min(margins),
                              "differs_from_unpenalized": new != ref["generated_ids"]})
    import transformers
    doc = {"max_new_tokens": MAX_NEW, "transformers": transformers.__version__,
           "torch": torch.__version__, "device": dev, "cases": cases}
    with open(os.path.join(out_dir, "ref_generate_penalties.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    for c in cases:
        print(c["name"], c["repetition_penalty"], c["presence_penalty"], c["frequency_penalty"], c["logit_bias"],
              "margin %.4f" % c["min_top2_margin"], "differs" if c["differs_from_unpenalized"] else "same")


if __name__ == "__main__":
    main()
